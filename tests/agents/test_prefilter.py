import pytest

from agents.kernlog.prefilter import DEFAULT_FAULT_PATTERNS, DEFAULT_KEEP_PATTERNS, PreFilter

CASES = [
    # (line, keep, fault)
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.", True, True),
    ("NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error", True, True),
    ("nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error", True, True),
    ("NVRM: GPU at PCI:0000:3b:00: GPU-1d2c3b4a-0000-1111-2222-333344445555", True, False),
    ("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15", True, False),
    ("nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver", True, False),
    ("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", True, True),
    ("e1000e 0000:00:1f.6 eth0: NIC Link is Up 1000 Mbps Full Duplex", False, False),
    ("EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode", False, False),
    ("usb 1-1: new high-speed USB device number 2 using xhci_hcd", False, False),
]


@pytest.mark.parametrize(("line", "keep", "fault"), CASES)
def test_default_patterns(line: str, keep: bool, fault: bool) -> None:
    verdict = PreFilter(DEFAULT_KEEP_PATTERNS, DEFAULT_FAULT_PATTERNS)(line)
    assert (verdict.keep, verdict.fault) == (keep, fault)


def test_aer_lines_kept_for_gpus_and_root_ports_only_once_addresses_are_known() -> None:
    f = PreFilter(DEFAULT_KEEP_PATTERNS, DEFAULT_FAULT_PATTERNS)
    gpu_aer = "pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0"
    nic_aer = "pcieport 0000:00:1c.0: AER: Corrected error received: 0000:02:00.0"
    # Unknown GPU addresses: every AER line is kept.
    assert f(nic_aer).keep
    f.set_gpu_pci_addresses(["00000000:3B:00.0", "0000:3a:00.0"])
    assert f(gpu_aer).keep and f(gpu_aer).fault
    assert not f(nic_aer).keep
    bus_error = "pcieport 0000:3a:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"
    assert f(bus_error).keep and not f(bus_error).fault


def test_patterns_are_configurable() -> None:
    f = PreFilter([r"mlx5_core"], [r"mlx5_core.*fatal"])
    assert f("mlx5_core 0000:5e:00.0: fatal error").fault
    assert not f("NVRM: Xid (PCI:0000:3b:00): 79").keep

