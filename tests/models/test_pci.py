"""PCI addresses: every spelling the kernel, the driver and NVML use, one canonical form."""

from __future__ import annotations

import pytest

from models.pci import normalize_pci

ACCEPTED = [
    # (text, canonical, where it is written so)
    ("0000:3b:00.0", "0000:3b:00.0", "the kernel's device lines, sysfs"),
    ("0000:3B:00.0", "0000:3b:00.0", "upper-case hex"),
    ("00000000:3B:00.0", "0000:3b:00.0", "NVML's bus id, 8-digit domain"),
    ("00000000:3b:00.0", "0000:3b:00.0", "8-digit domain, lower case"),
    ("0000:3b:00", "0000:3b:00.0", "older Xid lines, no function"),
    ("0000:18:00", "0000:18:00.0", "no function"),
    ("3b:00.0", "0000:3b:00.0", "no domain"),
    ("3b:00", "0000:3b:00.0", "bus and device only"),
    ("PCI:0000:3b:00", "0000:3b:00.0", "Xid and identity lines"),
    ("PCI:0000:3B:00", "0000:3b:00.0", "Xid lines, upper-case hex"),
    ("PCI:0000:18:00.0", "0000:18:00.0", "PCI: prefix with function"),
    ("PCI:3b:00", "0000:3b:00.0", "PCI: prefix, no domain"),
    ("pci:0000:3b:00.0", "0000:3b:00.0", "kmsg DEVICE=+pci: key"),
    ("0000:3b:00.7", "0000:3b:00.7", "function kept"),
    ("0001:3b:00.0", "0001:3b:00.0", "second domain"),
    ("10000:e1:00.0", "10000:e1:00.0", "a 5-digit (VMD) domain"),
    ("00010000:E1:00.0", "10000:e1:00.0", "the same in NVML's spelling"),
    ("  0000:3b:00.0\n", "0000:3b:00.0", "surrounding white space"),
]

REJECTED = [
    (None, "absent"),
    ("", "empty"),
    ("   ", "white space"),
    ("PCI:xxxx:xx:xx", "redacted"),
    ("PCI:...", "elided"),
    ("0000:3b", "domain and bus only"),
    ("3b", "bus only"),
    ("0000:3b:0", "a truncated line"),
    ("0000:3b:00.8", "function over 7"),
    ("0000:3b:00.0.0", "two functions"),
    ("000:3b:00.0", "3-digit domain"),
    ("000000000:3b:00.0", "9-digit domain"),
    ("0000-3b-00.0", "wrong separators"),
    ("0000:3b:00.0 extra", "trailing text"),
    ("GPU-1c7e4c02-8f3a-4b5c-9d6e-0a1b2c3d4e5f", "a GPU UUID"),
]


@pytest.mark.parametrize(("text", "want", "form"), ACCEPTED, ids=[f for _, _, f in ACCEPTED])
def test_accepted(text: str, want: str, form: str) -> None:
    assert normalize_pci(text) == want


@pytest.mark.parametrize(("text", "form"), REJECTED, ids=[f for _, f in REJECTED])
def test_rejected(text: str | None, form: str) -> None:
    assert normalize_pci(text) is None


@pytest.mark.parametrize("text", [t for t, _, _ in ACCEPTED])
def test_canonical_form_is_a_fixed_point(text: str) -> None:
    canonical = normalize_pci(text)
    assert normalize_pci(canonical) == canonical
