"""NVML (through nvidia-ml-py's `pynvml`): inventory, GPU processes and fault events."""
