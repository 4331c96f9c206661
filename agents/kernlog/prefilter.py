"""Keep only GPU-relevant kernel lines; mark the ones that report a fault."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from models.pci import BDF, normalize_pci

# Patterns are tried one by one with re.search; one that starts with a literal is found by a fast
# substring scan (about 0.2 µs on a typical line), one that starts with \b or a group is not (>2 µs),
# and this runs for every kernel line.
DEFAULT_KEEP_PATTERNS: tuple[str, ...] = (
    r"NVRM",
    r"Xid",  # also SXid
    r"nvswitch",
    r"nvidia",
    r"fallen off the bus",
)
DEFAULT_FAULT_PATTERNS: tuple[str, ...] = (
    r"\bS?Xid\b",
    r"fallen off the bus",
    r"AER: (Uncorrected|Multiple Uncorrected)",
    r"severity=(Uncorrected|Fatal|Uncorrectable)",
    r"GPU has fallen off",
    r"RmInitAdapter failed",
)
# AER and PCIe Bus Error lines are kept when they name a GPU or a GPU's root port (or any device
# while the GPU addresses are not known yet).
_AER = (re.compile(r"AER:"), re.compile(r"PCIe Bus Error"))
_BDF = re.compile(rf"\b({BDF})\b")


@dataclass(frozen=True, slots=True)
class LineDecision:
    """`keep`: the line concerns a GPU; `fault`: it reports a fault."""

    keep: bool
    fault: bool


_DROP = LineDecision(False, False)


class PreFilter:
    def __init__(self, keep_patterns: Sequence[str], fault_patterns: Sequence[str]) -> None:
        self._keep = tuple(re.compile(p) for p in keep_patterns)
        # The same patterns over many lines at once (MULTILINE keeps ^ and $ per line): a block in
        # which none matches holds no line to keep, and is skipped without a look at each line.
        self._block = (*(re.compile(p, re.MULTILINE) for p in keep_patterns), *_AER)
        self._fault = re.compile("|".join(f"(?:{p})" for p in fault_patterns)) if fault_patterns else None
        self._lock = threading.Lock()
        self._pci: frozenset[str] | None = None

    def set_gpu_pci_addresses(self, addresses: Iterable[str]) -> None:
        """GPU and root-port addresses (`0000:3b:00.0`); AER lines for other devices are then dropped."""
        with self._lock:
            self._pci = frozenset(filter(None, map(normalize_pci, addresses)))

    def may_match(self, block: str) -> bool:
        """False when no line of `block` (lines joined by newlines) can be kept."""
        return any(p.search(block) for p in self._block)

    def __call__(self, message: str) -> LineDecision:
        for pattern in self._keep:
            if pattern.search(message):
                break
        else:
            if not (_AER[0].search(message) or _AER[1].search(message)):
                return _DROP
            with self._lock:
                pci = self._pci
            if pci is not None and not any(normalize_pci(b) in pci for b in _BDF.findall(message)):
                return _DROP
        return LineDecision(True, bool(self._fault and self._fault.search(message)))

