"""WORKFLOW_XID_45 and WORKFLOW_XID_48: the cleanup after a fault, and the double-bit error.

NVIDIA's text (Fault Resolution Buckets):

WORKFLOW_XID_45: "Solo: RESTART_FM Not Solo: IGNORE (follow guidance in other Xid)"

WORKFLOW_XID_48: "Data Center Recovery Action Solo: RESET_GPU w/ 63 or 64: DRAIN_AND_RESET
Investagatory Action Solo: RUN_FIELDDIAG Not Solo: String in error would tell us what unit was
impacted. FB: follow Xid63/64 guidance All other SRAM: check SRAM Error Threshold flag (nvidia-smi
<sram_threshold_exceeded> or NSM Msg Type 0x3, Cmd Code 0x7D, bit 0. If set RUN_FIELDDIAG"

And the catalog's row of Xid 48: "If the ECC error is reported for SRAM (excludes 'framebuffer'),
check for SRAM DBE thresholds and follow RMA flow if exceeded". Xid 171 and 172 ("Additional to Xid 48
providing more details ... to differentiate DRAM/SRAM") say which, when the line does not.
"""

from __future__ import annotations

from models.workflows import WorkflowDecision, WorkflowFacts

# Codes that report the row remapping of a DBE: with them, drain and reset.
REMAP_XIDS = frozenset({63, 64})


def workflow_xid_45(facts: WorkflowFacts) -> WorkflowDecision | None:
    """Xid 45 alone is the Fabric Manager's to restart; with another Xid, that one's guidance."""
    if not facts.of(45):
        return None
    others = sorted(facts.xids - {45})
    if others:
        shown = ", ".join(f"Xid {x}" for x in others)
        return WorkflowDecision("WORKFLOW_XID_45", "IGNORE", f"Not Solo ({shown}): IGNORE (follow guidance in "
                                "other Xid)")
    return WorkflowDecision("WORKFLOW_XID_45", "RESTART_FM", "Solo: RESTART_FM")


def workflow_xid_48(facts: WorkflowFacts) -> WorkflowDecision | None:
    """A DBE's recovery (reset, or drain and reset with its row remapping) and what to investigate."""
    reports = facts.of(48)
    if not reports:
        return None
    remap = sorted(facts.xids & REMAP_XIDS)
    text = " ".join(r.message.lower() for r in reports)
    if 172 in facts.xids or ("sram" in text and "framebuffer" not in text):
        unit = "SRAM"
    elif 171 in facts.xids or "framebuffer" in text or "dram" in text:
        unit = "FB"
    else:
        unit = None
    if remap:
        shown = " and ".join(f"Xid {x}" for x in remap)
        action, why = "DRAIN_AND_RESET", f"w/ 63 or 64 ({shown}): DRAIN_AND_RESET"
    else:
        action, why = "RESET_GPU", "Solo: RESET_GPU"
    solo = not facts.xids - {48, 171, 172}
    if unit == "SRAM":
        investigate = "check the SRAM error threshold flag (nvidia-smi sram_threshold_exceeded); if set RUN_FIELDDIAG"
        why += "; SRAM: check SRAM Error Threshold flag"
    elif solo:
        investigate, why = "RUN_FIELDDIAG", why + "; investigate Solo: RUN_FIELDDIAG"
    elif unit == "FB":
        investigate, why = "follow the Xid 63/64 guidance", why + "; FB: follow Xid63/64 guidance"
    else:
        investigate, why = "RUN_FIELDDIAG", why + "; the line names no unit: RUN_FIELDDIAG"
    return WorkflowDecision("WORKFLOW_XID_48", action, why, investigate)
