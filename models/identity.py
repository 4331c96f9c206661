"""Incident identity: which component a fault belongs to, and which reports are one fault.

An incident is the fault of one component, never of one sensor report or fault family:

- `gpu`: a GPU, by its UUID (by its PCI address while the UUID is not known);
- `nvswitch`: an NVSwitch, by its PCI address (SXid reports name the switch, not a GPU);
- `node`: a node's driver, for driver failures that name no GPU and belong to no GPU fault;
- `workload`: an application fault that follows one workload across GPUs and nodes (a job that
  crashed, a teardown storm): the job's, not the hardware's;
- `fleet`: one fault family on many nodes at once.

Every sensor's view of one fault is one **occurrence** of its incident and counts once: the kernel
and NVML report of an Xid; an NVML double-bit ECC or GPU-lost event with its Xid 48/79; the AER
report with the Xid 79, "fallen off the bus" and GPU-lost driver lines around it; an Xid 119/120
with its crash dump, RPC history and the Xid 154 recovery action that follows. Two reports join one
occurrence when they belong to the same companion group, arrive within `window_s` of the
occurrence's start, and the occurrence does not hold that signal (source and code) yet: the second
Xid 74 line of a storm is a second fault, the NVML copy of the first is not.

GPUs that vanish are seen from every side, and those reports are one fault with the GPU-lost or
driver report of the node they come with (`VANISHED_CODES`): the node's GPU count, the driver that
did not load, the cluster's allocatable, the device plugin, NVML's count drop. A health condition
reported again while it holds is the same fault report, stored once (`models.signals.finding`).

`xidpipe scan`, the stream worker and `xidpipe replay` all use these functions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from models.vocabulary import ComponentKind, Family, family_rank

FINGERPRINT_VERSION = 2
FINGERPRINT_FIELDS = ("component", "node", "component_id")

# Families whose reports are views of one fault when they arrive together.
_COMPANIONS: dict[str, Family] = {
    Family.GPU_LOST: Family.GPU_LOST,
    Family.PCIE: Family.GPU_LOST,  # the AER report on the GPU or its root port comes with the bus loss
    Family.GSP: Family.GSP,
    Family.RECOVERY_ACTION: Family.GSP,  # Xid 154 (and NVML's recovery action) follows the GSP failure
    Family.MEMORY: Family.MEMORY,
    Family.APPLICATION: Family.APPLICATION,  # one crash logs Xid 13 then Xid 43
}

# Faults that put the GPU in a state it stays in until it is reset (off the bus; GSP down): every
# report within the window, repeats of one line included, is the one fault.
ONE_SHOT_GROUPS = frozenset({Family.GPU_LOST, Family.GSP})

# Node-level reports (no PCI address, no UUID) that belong to the GPU fault of their own kind they
# come with ("GPU lost" assertions with an Xid 79, GSP timeouts with an Xid 119) ...
NODE_LEVEL_COMPANION_FAMILIES = frozenset({Family.GPU_LOST, Family.GSP, Family.RECOVERY_ACTION})
# Reports that a node's GPUs vanished or its driver did not come up (`models.signals.node_health`,
# `models.signals.kube_gpus`, `models.signals.nvml`'s count drop): each is one fault with whatever GPU-lost
# or driver report of the node it comes with, within the occurrence window, whichever came first.
VANISHED_CODES = frozenset({"gpu_count", "driver_load", "gpu_allocatable", "device_plugin", "GPU missing"})
_VANISHED_GROUPS = frozenset({Family.GPU_LOST, Family.DRIVER})
# ... and driver reports that follow whatever fatal GPU fault they come with: the crash-dump notice and
# the "reset required" assertion (RPC-history and libos bodies join their Xid 119/120 record in the parser).
ATTACHING_DRIVER_ERRORS = frozenset({"crash_dump", "reset_required"})


def attaches_to_gpu_fault(family: str, error: object) -> str | None:
    """How a node-level report joins a GPU fault on its node: "same" (an occurrence of its own
    companion group), "any" (the closest occurrence of any group) or None (it is the node's own)."""
    if family in NODE_LEVEL_COMPANION_FAMILIES:
        return "same"
    if error in ATTACHING_DRIVER_ERRORS:
        return "any"
    return None


def occurrence_group(signals: list[str] | tuple[str, ...] | None) -> str | None:
    """The companion group of an occurrence, from its signals."""
    return signals[0].split("/", 1)[0] if signals else None


@dataclass(frozen=True, slots=True)
class Component:
    kind: ComponentKind
    node: str  # the node; "" for a workload (it spans nodes); the cluster for the fleet
    id: str  # GPU UUID or PCI address, NVSwitch PCI address, "driver", workload, fault family

    @property
    def fingerprint(self) -> str:
        return incident_fingerprint(self.kind, self.node, self.id)


@lru_cache(maxsize=65_536)  # a pure function asked several times per fault: keep the recent answers
def incident_fingerprint(component: str, node: str, component_id: str) -> str:
    """`v2:<16 hex>` over (component, node, component id); pids, codes, addresses of other devices
    and times never enter it."""
    payload = "\x1f".join((component, node, component_id)).encode("utf-8")
    return f"v{FINGERPRINT_VERSION}:{hashlib.sha256(payload).hexdigest()[:16]}"


def component_of(
    *, node: str, kind: str, family: str, pci: str | None, gpu_uuid: str | None,
    workload: str | None = None,
) -> Component:
    """The component a fault report is about, before context moves it (see `stays_with_gpu`).

    SXid reports are the NVSwitch's; an application-class fault of a known workload is the
    workload's; a report naming a GPU is the GPU's; anything else is the node's driver.
    """
    if kind == "sxid" and pci:
        return Component(ComponentKind.NVSWITCH, node, pci)
    if family == Family.APPLICATION and workload:
        return Component(ComponentKind.WORKLOAD, "", workload)
    gpu = gpu_uuid or pci
    if gpu:
        return Component(ComponentKind.GPU, node, gpu)
    return Component(ComponentKind.NODE, node, "driver")


def gpu_key(gpu_uuid: str | None, pci: str | None) -> str:
    """The GPU a report is about, as fault events record it: the UUID, else the PCI address, else "node"."""
    return gpu_uuid or pci or "node"


def gpu_component(node: str, gpu_uuid: str | None, pci: str | None) -> Component | None:
    """The GPU component of a report that names one."""
    gpu = gpu_uuid or pci
    return Component(ComponentKind.GPU, node, gpu) if gpu else None


def stays_with_gpu(workloads_only_here: int, faults_here: int, *, repeat_threshold: int,
                   min_distinct_workloads: int) -> bool:
    """Whether application faults on one GPU are the GPU's rather than their workloads': the same
    GPU repeats them across `min_distinct_workloads` different workloads that faulted on no other
    GPU, `repeat_threshold` times or more (NVIDIA's workflow for Xid 13, 31, 43, ...)."""
    return faults_here >= repeat_threshold and workloads_only_here >= min_distinct_workloads


def primary_family(current: str | None, new: str) -> str:
    """The family an incident is labelled with after a report of `new`: the more severe
    (`models.vocabulary.FAMILY_PRECEDENCE`)."""
    if current is None:
        return new
    return new if family_rank(new) < family_rank(current) else current


def companion_group(family: str) -> str:
    return _COMPANIONS.get(family, family)


def signal(family: str, source: str, code: str, group: str | None = None) -> str:
    """One report's signal as an occurrence records it: `<companion group>/<source>:<code>`; `group`
    when the report attaches to an occurrence of another group (a crash dump)."""
    return f"{group or companion_group(family)}/{source}:{code}"


def joins_occurrence(occurrence_at: datetime | None, signals: list[str] | tuple[str, ...] | None,
                     at: datetime, report: str, window_s: float, duplicate_window_s: float = 5.0) -> bool:
    """Whether a report (its `signal`) at `at` is another view of the occurrence counted last.

    A companion (same group, another code) joins within `window_s` of the occurrence's start; the
    same code from another sensor (NVML's copy of a kernel Xid) within `duplicate_window_s`; the same
    code from the same sensor never (that is the next fault).
    """
    if occurrence_at is None or not signals:
        return False
    group, _, rest = report.partition("/")
    code = rest.partition(":")[2]
    vanished = _vanished(code, signals) and {group, occurrence_group(signals)} <= _VANISHED_GROUPS
    if occurrence_group(signals) != group and not vanished:
        return False
    if group in ONE_SHOT_GROUPS or vanished:  # a lost GPU cannot be lost again until it is back: one fault
        return abs((at - occurrence_at).total_seconds()) <= window_s
    if report in signals:
        return False
    same_code = any(s.partition(":")[2] == code for s in signals)
    return abs((at - occurrence_at).total_seconds()) <= (duplicate_window_s if same_code else window_s)


def _vanished(code: str, signals: list[str] | tuple[str, ...]) -> bool:
    """Whether the report or the occurrence is a vanished-GPU report (`VANISHED_CODES`)."""
    return code in VANISHED_CODES or any(s.partition(":")[2] in VANISHED_CODES for s in signals)
