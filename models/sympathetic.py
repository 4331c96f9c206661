"""Sympathetic faults: the application-class reports a hardware fault causes, which follow their cause.

A hardware fault kills the work on its GPU, and the driver and the killed processes report that too,
in application-class Xids: NVIDIA's catalog says so, and what to do with them.

- **Xid 45** (ROBUST_CHANNEL_PREEMPTIVE_REMOVAL, "Preemptive cleanup, due to previous errors -- Most
  likely to see when running multiple cuda applications and hitting a DBE"): its investigatory action
  is "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)", and the rows of Xid 94 and 95 say "Xid 45
  will be seen in relation to this error". After a hardware fault of its GPU it is that fault's.
- **Xid 13, 31, 43 and the other application-class codes** of a process right after a double-bit
  error, a contained or uncontained memory error, a GPU lost or a GSP failure: Xid 48 "is also
  reported back to the user application", Xid 95 errors "affect multiple applications", and a process
  whose GPU fell off the bus or whose GSP stopped answering fails its next call. For Xid 94 "these
  errors are contained to one application ... All other applications running at the time of the Xid
  are unaffected": only the process it names follows it.

`sympathetic_to` decides whether one report follows the hardware fault its GPU's incident counted
last, within `PipelinePolicy.sympathetic_window_s` of it, and says why. Such a report joins that
incident as another view of its occurrence (it counts nothing), and its workload is recorded there as
*affected* ("your job was killed by a hardware fault on GPU X"), not at fault: no incident of its
own, no message to its team as if the job had failed (`models.grouping.Grouper`).
"""

from __future__ import annotations

from datetime import datetime

from models.incidents import IncidentState
from models.vocabulary import Family

XID_45 = 45
# The families whose faults kill the processes on their GPU: their Xid 13, 31, 43 ... follow them.
KILLING_FAMILIES = frozenset({Family.MEMORY, Family.GPU_LOST, Family.GSP})
# Codes whose fault is contained to the one application the line names (Xid 94): only its process follows it.
CONTAINED_XIDS = frozenset({94})
# Codes that hit every application on the GPU whatever process a line names.
KILLS_ALL_XIDS = frozenset({48, 95, 64, 140, 79, 119, 120})


def cause_codes(signals: tuple[str, ...]) -> set[int]:
    """The Xids an occurrence's signals (`models.identity.signal`: `<group>/<source>:Xid 48`) hold."""
    out: set[int] = set()
    for sig in signals:
        code = sig.partition(":")[2]
        kind, _, number = code.partition(" ")
        if kind == "Xid" and number.isascii() and number.isdigit():
            out.add(int(number))
    return out


def sympathetic_to(xid: int | None, pid: int | None, at: datetime, cause: IncidentState, *, window_s: float,
                   skew_s: float = 0.0) -> str | None:
    """Why an application-class report (its Xid, process and time) is a sympathetic report of the fault
    `cause` (its GPU's incident) counted last, or None when it is a fault of its own."""
    if (xid is None or cause.status != "open" or cause.component != "gpu" or cause.family == Family.APPLICATION
            or cause.occurrence_at is None):
        return None
    gap = (at - cause.occurrence_at).total_seconds()
    if not -skew_s <= gap <= window_s:
        return None
    codes = cause_codes(cause.occurrence_signals)
    shown = ", ".join(f"Xid {c}" for c in sorted(codes)) or cause.family
    after = f"{gap:.0f} s after the {cause.family} fault ({shown}) of its GPU"
    contained = bool(codes & CONTAINED_XIDS) and not codes & KILLS_ALL_XIDS
    if contained and pid is not None and cause.occurrence_pids and pid not in cause.occurrence_pids:
        return None  # "contained to one application ... all other applications ... are unaffected"
    if xid == XID_45:
        return f"Xid 45 {after}: NVIDIA's 'Not Solo: IGNORE (follow other Xid)'"
    if cause.family not in KILLING_FAMILIES:
        return None
    if contained and (pid is None or pid not in cause.occurrence_pids):
        return None
    return f"Xid {xid} {after}: the fault killed the process that reports it"
