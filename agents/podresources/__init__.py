"""The kubelet PodResources API (gRPC v1 on a unix socket): which container holds which GPU."""
