"""Kernel-log sources: /dev/kmsg, journald and plain files, each resumable from a cursor."""
