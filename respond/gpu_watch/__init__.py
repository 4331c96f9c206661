"""The cluster's side of GPUs that vanish: the responder watches the GPU nodes (their `nvidia.com/gpu`
capacity, allocatable and expected count) and the NVIDIA device plugin's pods, and publishes each
node's view on the kube topic (`KubeGpuView`), where the stream decides and groups it with the
node's other reports (one grouping engine). It runs on the acting responder only (the leader).

- `view`: a node's view from the API's raw JSON (pure);
- `watch`: the list+watch loops and the tracker (the only module here that imports kubernetes);
- `forward`: the views to Kafka, from the watch's threads through the responder's producer.
"""
