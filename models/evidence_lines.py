"""The kernel-log evidence as a reader needs it: the fault's own lines, not the noise around them.

The agent captures the kernel-log lines around a fault (`agents/evidence.py`): the lines before it
and the ones the driver writes in the seconds after (the Xid 63 after a 48, the Xid 154 and the crash
dump after a 119, an SXid's severity and data lines, the bus-loss follow-ups), each after its time in
UTC when the agent knew it (`2026-11-25T12:52:08.000000Z  <line>`). `select` keeps:

- every line that names the incident's device: its PCI address in any form the kernel writes it
  (`PCI:0000:b7:00`, `0000:b7:00.0`, `b7:00.0`), its UUID or its serial;
- the GPU-relevant lines around those (the driver's `NVRM:` lines, Xid, SXid, AER and `pcieport`
  reports, NVSwitch lines) that name no other device, or only a device a line of its own names
  beside it (the root port that reported the GPU's AER error): within `AROUND_S` of a line of its
  own when the times are known, else within `AROUND_LINES` lines;

and drops the rest (file systems, cgroups, other devices, the driver's start-up banners). A run of
the same line, or a long run of lines that differ only in their numbers (an Xid storm), is shown
once with how many more there are. The whole capture is attached beside it.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

AROUND_S = 60.0  # a line this close to one of the fault's own lines belongs to the same event
AROUND_LINES = 5  # the same, for a capture without times
FOLD_RUN = 5  # this many lines in a row that differ only in their numbers are shown as one
_TIMED = re.compile(r"^(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d))  (?P<text>.*)$")
# A log line's own prefix (syslog's "Nov 25 12:52:08 host kernel: ", dmesg's "[ 8123.000000] " or
# "[Wed Nov 25 12:52:08 2026] "), dropped where the capture gives the line's time in UTC.
_PREFIX = re.compile(
    r"^(?:<\d{1,3}>)?(?:(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S{8,40}) \S{1,253} "
    r"kernel: ?)?(?:\[[^\]\n]{1,40}\] ?)?")
_ANY_PCI = re.compile(r"(?<![0-9a-fA-F])(?:(?:[0-9a-fA-F]{4,8}:)[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?|"
                      r"[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?![0-9a-fA-F])")
_DIGITS = re.compile(r"[0-9]+")
_GPU_KINDS = re.compile(r"NVRM|\bXid\b|\bSXid\b|\bAER\b|pcieport|nvswitch|NVSwitch")
_START_UP = re.compile(r"loading NVIDIA UNIX|Loading NVIDIA Kernel Mode Setting|Loaded the UVM driver|"
                       r"Nvlink Core is being initialized|persistence mode enabled|enabling device|"
                       r"AER: enabled with IRQ")


@dataclass(frozen=True, slots=True)
class Line:
    at: datetime | None
    text: str  # as the kernel wrote it, its own prefix dropped when `at` is known


@dataclass(frozen=True, slots=True)
class Selection:
    lines: tuple[str, ...]  # as shown: "<time in UTC>  <text>", runs of one text folded
    kept: int  # captured lines kept
    total: int  # captured lines
    timed: bool  # the capture gives each line's time


def parse_capture(text: str) -> list[Line]:
    """The captured lines, each with its time when the capture gives one."""
    out: list[Line] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        m = _TIMED.match(raw)
        at = None
        if m:
            try:
                at = datetime.fromisoformat(m["at"].replace("Z", "+00:00"))
            except ValueError:
                at = None
        if at is None:
            out.append(Line(None, raw))
        else:
            text_ = m["text"] if m else raw
            out.append(Line(at, text_[_PREFIX.match(text_).end():] or text_))  # type: ignore[union-attr]
    return out


def _norm(address: str) -> tuple[str, str, str]:
    """(bus, device, function) of a PCI address in any form; the function "0" when it is not written."""
    parts = address.lower().split(":")
    bus, rest = parts[-2], parts[-1]
    dev, _, fn = rest.partition(".")
    return bus, dev, fn or "0"


def _addresses(text: str) -> set[tuple[str, str, str]]:
    return {_norm(m.group(0)) for m in _ANY_PCI.finditer(text)}


def select(text: str, *, pci: str | None, uuid: str | None = None, serial: str | None = None) -> Selection:
    """The fault's own lines of a captured kernel log and the GPU-relevant lines around them."""
    lines = parse_capture(text)
    device = _norm(pci) if pci else None
    names = [n for n in (uuid, serial) if n]

    def own(line: Line) -> bool:
        return (device is not None and device in _addresses(line.text)) or any(n in line.text for n in names)

    mine = [i for i, ln in enumerate(lines) if own(ln)]
    related = set().union(*(_addresses(lines[i].text) for i in mine)) if mine else set()
    keep = set(mine)
    for i, ln in enumerate(lines):
        if i in keep or not _GPU_KINDS.search(ln.text) or _START_UP.search(ln.text):
            continue
        if _addresses(ln.text) - related:
            continue  # another device's line
        if any(_near(lines, i, j) for j in mine):
            keep.add(i)
    kept = [lines[i] for i in sorted(keep)]
    return Selection(tuple(_folded(kept)), len(kept), len(lines), any(ln.at is not None for ln in lines))


def _near(lines: Sequence[Line], i: int, j: int) -> bool:
    a, b = lines[i].at, lines[j].at
    if a is not None and b is not None:
        return abs((a - b).total_seconds()) <= AROUND_S
    return abs(i - j) <= AROUND_LINES


def when(at: datetime | None) -> str:
    """A line's time as shown: ISO 8601 in UTC, with the fraction only when there is one."""
    if at is None:
        return ""
    text = at.strftime("%Y-%m-%dT%H:%M:%S")
    if at.microsecond:
        text += f".{at.microsecond:06d}".rstrip("0")
    return text + "Z"


def _shape(text: str) -> str:
    return _DIGITS.sub("#", text)


def _folded(lines: Sequence[Line]) -> list[str]:
    """Each line with its time. A run of the same line is shown once; a run of `FOLD_RUN` or more lines
    that differ only in their numbers (a storm of one Xid on several links) shows its first line and how
    many more there are until when."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i
        while j + 1 < len(lines) and lines[j + 1].text == lines[i].text:
            j += 1
        if j == i:
            while j + 1 < len(lines) and _shape(lines[j + 1].text) == _shape(lines[i].text):
                j += 1
            if j - i + 1 < FOLD_RUN:
                j = i
        head = f"{when(lines[i].at)}  {lines[i].text}" if lines[i].at is not None else lines[i].text
        if j > i:
            same = all(ln.text == lines[i].text for ln in lines[i:j + 1])
            until = f", the last at {when(lines[j].at)}" if lines[j].at is not None else ""
            head += f"  [and {j - i} more {'time(s)' if same else 'like it'}{until}]"
        out.append(head)
        i = j + 1
    return out


def capture_line(at: datetime | None, text: str) -> str:
    """One line of a kernel-log capture: its time in UTC first when known (what `parse_capture` reads)."""
    return f"{when(at.astimezone(UTC))}  {text}" if at is not None and at.tzinfo is not None else text
