"""The VBIOS from a recorded `nvidia-smi -q`."""

from __future__ import annotations

from pathlib import Path

from models.smi_text import vbios_version

SAMPLES = Path(__file__).resolve().parents[2] / "xidpipe" / "samples" / "cluster" / "evidence"
TWO = """==============NVSMI LOG==============

Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    GPU UUID                              : GPU-aaaa
    VBIOS Version                         : 96.00.99.00.01
    Inforom Version
        Image Version                     : G520.0200.00.05

GPU 00000000:3B:00.0
    GPU UUID                              : GPU-bbbb
    VBIOS Version                         : 96.00.A1.00.02
"""


def test_the_sample_capture() -> None:
    text = (SAMPLES / "gpu-node-02-xid48" / "nvidia-smi-q.txt").read_text()
    assert vbios_version(text, "GPU-a40e77c1-6d2f-4b8a-8c11-52c9f0e4b007") == "96.00.99.00.01"
    assert vbios_version((SAMPLES / "gpu-node-03-xid79" / "nvidia-smi-q.txt").read_text()) is None  # it failed


def test_the_section_of_the_gpu_asked_for() -> None:
    assert vbios_version(TWO, "GPU-bbbb") == "96.00.A1.00.02" and vbios_version(TWO, "gpu-aaaa") == "96.00.99.00.01"
    assert vbios_version(TWO) == "96.00.99.00.01" and vbios_version(TWO, "GPU-cccc") is None
    assert vbios_version(TWO.replace("96.00.A1.00.02", "N/A"), "GPU-bbbb") is None
    assert vbios_version("") is None and vbios_version("VBIOS Version : 1\n") is None  # no GPU section
