"""WORKFLOW_NVLINK5_ERR: Xid 144-150 (NVLink5) decoded from the sub-code and error status of the line.

NVIDIA's text (Fault Resolution Buckets, WORKFLOW_NVLINK5_ERR): "These errors need decoding of XID
message as follows to determine the resolution action: Format of the XID error message: Xid
(PCI:0000:BB:DF): <Xid Number> <sub component> <fatal vs nonfatal> <Crosscontain> <injected> <link>
(<intrInfo> <errorStatus> <errorDebugData[0]> ...) From the above message, <intrInfo>, <errorStatus>
must be decoded and evaluated using 'XID 144-150 Decode' to derive the final resolution."

`DECODE` holds the rows of NVIDIA's "XID 144-150 Decode" sheet: (Xid, sub-code, error status) →
(immediate action, investigatory action, severity). The sub-code is the name the line prints (both
names of a row that changed at R575, `NETIR_LINK_EVT/NETIR_LINK_DOWN`). Xid 149's link-down rows are
told apart by the link-down reason, six bits of intrInfo (`LINK_DOWN`: bits 19-14 before R575, 17-12
from R575, told apart by where the sub-code sits). A row the sheet does not hold is decided by the
severity the line prints (Fatal: RESET_GPU, CONTACT_SUPPORT; Nonfatal: IGNORE, CONTACT_SUPPORT), and
says so. XID_154_EVAL (the sheet's guidance class): "If an XID 154 is seen along with this error, take
that action. If no XID 154 present, RESTART_APP".
"""

from __future__ import annotations

import re

from models.workflows import WorkflowDecision, WorkflowFacts

_LINE = re.compile(r"^(?P<sub>[A-Za-z][A-Za-z0-9_/ ]{0,40}?)\s+(?P<sev>Fatal|Nonfatal|Non-fatal)\b.{0,40}?"
                   r"\bLink\s{0,4}(?P<link>[0-9]{1,3})\s{0,4}\((?P<regs>[0-9a-fA-Fx\s]{1,120})\)")

Row = tuple[str, str, str]  # immediate action, investigatory action, severity
_IGN, _CS, _RESET = "IGNORE", "CONTACT_SUPPORT", "RESET_GPU"
SW_ONLY = (_IGN, _CS, "Non-fatal")  # error status 0x80000000 of every sub-code
FATAL = (_RESET, _CS, "Fatal")
QUIET = (_IGN, _IGN, "Non-fatal")
WATCH = (_IGN, _CS, "Non-fatal")
EVAL = "XID_154_EVAL"
DECODE: dict[tuple[int, str, int], Row] = {
    (144, "SAW_MVB", 0x1): WATCH, (144, "SAW_MVB", 0x2): FATAL, (144, "SAW_MVB", 0x4): QUIET,
    (144, "SAW_MVB", 0x8): WATCH, (144, "SAW_MVB", 0x10): FATAL, (144, "SAW_MVB", 0x20): QUIET,
    (145, "RLW_CTRL", 0x80000000): SW_ONLY,
    (145, "RLW_REMAP", 0x1): (EVAL, _CS, "Non-fatal"), (145, "RLW_REMAP", 0x2): (EVAL, _CS, "Non-fatal"),
    **{(145, "RLW_REMAP", s): (EVAL, "CHECK_NVLINK_FAILURE_FLOW", "Non-fatal") for s in (0x4, 0x8, 0x10, 0x20)},
    (145, "RLW_REMAP", 0x40): FATAL, (145, "RLW_REMAP", 0x80): FATAL, (145, "RLW_REMAP", 0x100): QUIET,
    (145, "RLW_REMAP", 0x200): QUIET, (145, "RLW_REMAP", 0x80000000): SW_ONLY,
    (145, "RLW_RSPCOL", 0x1): QUIET, (145, "RLW_RSPCOL", 0x2): FATAL, (145, "RLW_RSPCOL", 0x80000000): SW_ONLY,
    # "Non-fatal*": promoteable, Action 2 (RESET_GPU) when the intrInfo says so
    **{(145, "RLW_RXPIPE", s): (_IGN, _CS, "Non-fatal*") for s in (0x1, 0x2, 0x4)},
    (145, "RLW_RXPIPE", 0x8): WATCH, (145, "RLW_RXPIPE", 0x80000000): SW_ONLY,
    (145, "RLW_SRC_TRACK", 0x1): FATAL, (145, "RLW_SRC_TRACK", 0x2): QUIET,
    (145, "RLW_SRC_TRACK", 0x4): (EVAL, _IGN, "Non-fatal"), (145, "RLW_SRC_TRACK", 0x8): (EVAL, _IGN, "Non-fatal"),
    (145, "RLW_SRC_TRACK", 0x10): FATAL, (145, "RLW_SRC_TRACK", 0x20): FATAL,
    (145, "RLW_SRC_TRACK", 0x80000000): SW_ONLY,
    (145, "RLW_TAGSTATE", 0x1): QUIET, (145, "RLW_TAGSTATE", 0x2): FATAL, (145, "RLW_TAGSTATE", 0x10000): QUIET,
    (145, "RLW_TAGSTATE", 0x20000): FATAL, (145, "RLW_TAGSTATE", 0x100000): FATAL,
    (145, "RLW_TAGSTATE", 0x80000000): SW_ONLY,
    **{(146, sub, s): row for sub in ("TLW_CTRL", "TLW_RX", "TLW_RX_PIPE0", "TLW_RX_PIPE1", "TLW_TX",
                                        "TLW_TX_PIPE0", "TLW_TX_PIPE1")
       for s, row in ((0x1, QUIET), (0x2, WATCH), (0x4, FATAL), (0x80000000, SW_ONLY))},
    (147, "TREX", 0x1): WATCH, (147, "TREX", 0x80000000): SW_ONLY,
    (148, "NVLPW_CTRL", 0x80000000): SW_ONLY, (148, "NVLPW", 0x80000000): SW_ONLY,
    **{(149, "NETIR_BER_EVENT", s): (_IGN, "INVESTIGATE_LINK_SI_AND_CABLES", "Non-fatal") for s in range(4)},
    (149, "NETIR_MFDE_EVENT", 0x1): (_RESET, _CS, "Fatal"), (149, "NETIR_MFDE_EVENT", 0x3): QUIET,
    **{(149, "NETIR_MFDE_EVENT", s): (_RESET, _CS, "Fatal") for s in (0x4, 0x5, 0x7)},
}
# Xid 149 NETIR_LINK_EVT / NETIR_LINK_DOWN by the link-down reason (intrInfo), every row "Link Fatal" but two.
LINK_DOWN: dict[int, Row] = {
    0b000000: (_RESET, "SYMPATHETIC_REPORT_SOLO", "Link Fatal"),
    0b000001: (_RESET, "REPORT_ISSUE (if seen >1 per day)", "Link Fatal"),
    **{r: (_RESET, "INVESTIGATE_LINK_SI", "Link Fatal") for r in (0b000010, 0b000100, 0b001010)},
    0b001111: (_RESET, "INVESTIGATE_SW_USER", "Link Fatal"),
    0b010000: (_RESET, "INVESTIGATE_SW_USER_LINK_SI", "Link Fatal"),
    0b010001: (_RESET, "INVESTIGATE_SW_USER", "Link Fatal"),
    0b010010: (_RESET, "INVESTIGATE_SW_USER_LINK_SI", "Link Fatal"),
    0b010101: (_RESET, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    0b010110: (_RESET, "INVESTIGATE_SW_USER", "Link Fatal"),
    **{r: (_RESET, "INVESTIGATE_PEER_DEVICE", "Link Fatal") for r in range(0b100000, 0b100110)},
    0b100110: (_IGN, "INVESTIGATE_SW/USER", "Link Fatal"),
    0b101000: (_IGN, "INVESTIGATE_HOST", "Fatal"),
    0b101010: (_RESET, "INVESTIGATE_LINK_SI_AND_CABLES", "Link Fatal?"),
    0b101011: (_RESET, "INVESTIGATE_LINK_SI_AND_CABLES", "Link Fatal?"),
}
NETIR_LINK = frozenset({"NETIR_LINK_EVT", "NETIR_LINK_DOWN", "NETIR", "NETIR_INT"})
_V1_LINK_EVT, _V2_LINK_EVT = 0b0111000110, 0b0010001  # the sub-code bits of NETIR_LINK_EVT before / from R575
# The order of the decisions' actions, most demanding first.
RANK = (_RESET, EVAL, "RESTART_APP", _IGN)


def decode(xid: int, message: str) -> tuple[str, int, Row, str] | None:
    """(sub-code, link, the sheet's row, how it was found) of one Xid 144-150 line; None if it does not read."""
    m = _LINE.search(message)
    if m is None:
        return None
    regs = [int(x, 16) for x in m["regs"].split() if re.fullmatch(r"0x[0-9a-fA-F]{1,8}", x)]
    if len(regs) < 2:
        return None
    intr, status = regs[0], regs[1]
    names = m["sub"].strip().split("/")
    link = int(m["link"])
    if xid == 149 and NETIR_LINK & set(names):
        reason = (intr >> 14) & 0x3F if intr & 0x3FF == _V1_LINK_EVT else (intr >> 12) & 0x3F
        row = LINK_DOWN.get(reason)
        if row is not None:
            return names[0], link, row, f"{names[0]}, link-down reason {reason:06b}"
    for name in names:
        row = DECODE.get((xid, name, status))
        if row is not None:
            return name, link, row, f"{name}, error status 0x{status:08x}"
    fatal = m["sev"] == "Fatal"
    row = (_RESET, _CS, "Fatal") if fatal else (_IGN, _CS, "Non-fatal")
    return names[0], link, row, f"{names[0]}, error status 0x{status:08x} (not in the decode sheet: by its severity)"


def workflow_nvlink5_err(facts: WorkflowFacts) -> WorkflowDecision | None:
    """The most demanding action NVIDIA's decode sheet gives the incident's Xid 144-150 lines."""
    decided: list[tuple[str, str, str]] = []  # (action, investigatory, why)
    for r in facts.reports:
        if not 144 <= r.xid <= 150:
            continue
        found = decode(r.xid, r.message)
        if found is None:
            continue
        _, link, (action, investigate, severity), how = found
        if action == EVAL:  # "If an XID 154 is seen along with this error, take that action. If no XID 154 present,
            action = "XID_154" if 154 in facts.xids else "RESTART_APP"  # RESTART_APP"
        decided.append((action, investigate, f"Xid {r.xid} {how}, link {link}: {severity}"))
    if not decided:
        return None
    decided.sort(key=lambda t: RANK.index(t[0]) if t[0] in RANK else 0)
    action, investigate, why = decided[0]
    more = f"; {len(decided) - 1} other line(s)" if len(decided) > 1 else ""
    return WorkflowDecision("WORKFLOW_NVLINK5_ERR", action, why + more, investigate)
