"""WORKFLOW_NVLINK_ERR: Xid 74 decoded from the registers of its line.

NVIDIA's text (Fault Resolution Buckets, WORKFLOW_NVLINK_ERR): "Extract the hex strings from the Xid
error message. Note that there should be seven fields in the Xid. ... The first, third, fourth and
fifth registers are valid for Hopper-based products. Evaluate the populate(d) registers. If bits other
than those specifically outlined below are seen, please report a bug." The bits it outlines are
`BITS` below, each with NVIDIA's words; the line is `NVLink: fatal error detected on link 12(0x0, 0x0,
0x10000, 0x0, 0x0, 0x0, 0x0)`.

The decision is the most demanding finding of the incident's Xid 74 lines (`RANK`), counting on each
link how often a bit was seen ("If seen more than 2 times on the same link", "If seen repeatedly").
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from models.workflows import WorkflowDecision, WorkflowFacts

_REGISTERS = re.compile(r"\blink\s{0,4}(?P<link>[0-9]{1,3})\s{0,4}\((?P<regs>[0-9a-fA-Fx,\s]{1,200})\)")


@dataclass(frozen=True, slots=True)
class Bits:
    """Bits of one register with what NVIDIA says of them: the class and NVIDIA's words."""

    register: int  # 1-based, as NVIDIA counts them
    bits: frozenset[int]
    kind: str  # ignore, sympathetic, ecc_parity, mechanical, signal_integrity, report_if_repeated, ...
    text: str


def _bits(register: int, bits: tuple[int, ...], kind: str, text: str) -> Bits:
    return Bits(register, frozenset(bits), kind, text)


SYMPATHETIC = ("These are generally sympathetic or secondary errors. If seen with other bits set or other Xid/SXid, "
               "please follow the resolution for those. If seen solo, please report a bug.")
ECC_PARITY = "Likely HW issue with ECC/Parity -> If seen more than 2 times on the same link, report a bug."
BITS: tuple[Bits, ...] = (
    _bits(1, (0, 23, 30), "ignore", "Can be safely ignored."),
    _bits(1, (1, 20), "sympathetic", SYMPATHETIC),
    _bits(1, (4, 5), "ecc_parity", ECC_PARITY),
    _bits(1, (8, 9, 12, 16, 17, 24, 28), "mechanical",
          "Could possibly be a HW issue: Check link mechanical connections and re-seat if a field resolution is "
          "required. Run diags if issue persists. If the issue persist, and diagnostics has passed please report "
          "a bug."),
    _bits(1, (21, 22), "signal_integrity",
          "Marginal channel SI issue. If other errors accompany this Xid, follow the resolution for those first. "
          "Otherwise, check link mechanical connections. Run Field Diags and report a bug."),
    _bits(1, (27, 29), "report_if_repeated", "If seen repeatedly, please report a bug."),
    _bits(3, (0, 1, 2, 6), "ecc_parity", ECC_PARITY),
    _bits(3, (13,), "report", "Not expected to be seen in production. If seen, please report a bug."),
    _bits(3, (16, 19), "diags_if_repeated", "If seen repeatedly, please run Field Diags and report a bug"),
    _bits(3, (17, 18), "report_if_repeated", "If seen repeatedly, please report a bug."),
    _bits(4, (16, 17), "sympathetic", SYMPATHETIC),
    _bits(4, (18,), "sympathetic_fabric_reset",
          "These are generally sympathetic or secondary errors, though a reset of the fabric is required. "
          "If seen with other bits set or other Xid/SXid, please follow the resolution for those. If seen solo, "
          "please report a bug."),
    _bits(5, (18, 19, 21, 22, 24, 25, 27, 28), "ecc_parity", ECC_PARITY),
    _bits(5, (20, 23, 26, 29), "threshold",
          "These errors represent a threshold of ECC errors being exceeded. There was no uncorrectable error at this "
          "time. Continue operation. If desired, Field Diags can be run to check for link integrity."),
)
UNLISTED = "If bits other than those specifically outlined below are seen, please report a bug."

# The decision's action per finding, most demanding first (the incident's decision is its first).
RANK = ("CHECK_MECHANICALS", "RUN_FIELDDIAG", "RESET_FABRIC", "REPORT_ISSUE", "FOLLOW_OTHER_XID", "CONTINUE", "IGNORE")


@dataclass(frozen=True, slots=True)
class Finding:
    link: int
    register: int
    bit: int
    kind: str
    text: str
    times: int  # how often the bit was seen on the link in the incident


def registers(message: str) -> tuple[int, list[int]] | None:
    """(link, register values) of an Xid 74 line; None when it carries none."""
    m = _REGISTERS.search(message)
    if m is None:
        return None
    values: list[int] = []
    for part in m["regs"].split(","):
        part = part.strip()
        try:
            values.append(int(part, 16))
        except ValueError:
            return None
    return int(m["link"]), values


def findings(facts: WorkflowFacts) -> list[Finding]:
    """Every bit set in the incident's Xid 74 lines, with NVIDIA's words and how often it was seen on its link."""
    seen: Counter[tuple[int, int, int]] = Counter()
    for r in facts.of(74):
        decoded = registers(r.message)
        if decoded is None:
            continue
        link, values = decoded
        for index, value in enumerate(values, start=1):
            for bit in range(64):
                if value >> bit & 1:
                    seen[(link, index, bit)] += 1
    out: list[Finding] = []
    for (link, register, bit), times in sorted(seen.items()):
        known = next((b for b in BITS if b.register == register and bit in b.bits), None)
        out.append(Finding(link, register, bit, known.kind if known else "unlisted", known.text if known else UNLISTED,
                           times))
    return out


def action_of(f: Finding, alone: bool) -> str:
    """NVIDIA's action for one finding; `alone`: no other bit or Xid accompanies it."""
    kind = f.kind
    if kind == "ignore":
        return "IGNORE"
    if kind in ("sympathetic", "sympathetic_fabric_reset"):
        if not alone:
            return "RESET_FABRIC" if kind == "sympathetic_fabric_reset" else "FOLLOW_OTHER_XID"
        return "REPORT_ISSUE"
    if kind == "ecc_parity":
        return "REPORT_ISSUE" if f.times > 2 else "CONTINUE"
    if kind == "mechanical":
        return "CHECK_MECHANICALS"
    if kind == "signal_integrity":
        return "FOLLOW_OTHER_XID" if not alone else "CHECK_MECHANICALS"
    if kind == "diags_if_repeated":
        return "RUN_FIELDDIAG" if f.times >= 2 else "CONTINUE"
    if kind == "report_if_repeated":
        return "REPORT_ISSUE" if f.times >= 2 else "CONTINUE"
    if kind == "threshold":
        return "CONTINUE"
    return "REPORT_ISSUE"  # "report" and bits NVIDIA does not list


def workflow_nvlink_err(facts: WorkflowFacts) -> WorkflowDecision | None:
    """The most demanding of NVIDIA's actions for the bits the incident's Xid 74 lines carry."""
    found = findings(facts)
    if not found:
        return None
    others = bool(facts.xids - {74})
    decided = [(action_of(f, alone=len(found) == 1 and not others), f) for f in found]
    decided.sort(key=lambda t: RANK.index(t[0]))
    action, first = decided[0]
    seen = "once" if first.times == 1 else f"{first.times} times"
    reason = (f"link {first.link}, register {first.register} bit {first.bit} ({seen}): '{first.text}'"
              + (f"; {len(found) - 1} other bit(s)" if len(found) > 1 else ""))
    investigate = {"mechanical": "RUN_FIELDDIAG", "signal_integrity": "RUN_FIELDDIAG",
                   "diags_if_repeated": "REPORT_ISSUE"}.get(first.kind) if action != "CONTINUE" else None
    return WorkflowDecision("WORKFLOW_NVLINK_ERR", action, reason, investigate)
