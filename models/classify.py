"""Classify a group of faults on one GPU: application or hardware, and why.

NVIDIA's workflow for application-class Xids (13, 31, 43, 45 ...): the same GPU repeating the fault
across different workloads points at the GPU ("suspected hardware"); the fault following one
workload across GPUs points at the application. Everything else starts from the catalog's category.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from models.vocabulary import Category, Family


@dataclass(frozen=True, slots=True)
class ClassifyPolicy:
    """Thresholds for the application-vs-hardware judgement.

    repeat_threshold: occurrences of application-class faults on one GPU from which a repeat is
        suspicious (default 3: one crash commonly logs two lines, e.g. Xid 13 then Xid 43).
    min_distinct_workloads: distinct processes that must have hit the fault on that GPU before the
        GPU rather than the job is suspected (default 2).
    """

    repeat_threshold: int = 3
    min_distinct_workloads: int = 2


@dataclass(frozen=True, slots=True)
class FaultGroup:
    """What the classifier needs to know about one (node, GPU, family) group."""

    family: str
    categories: Sequence[str]
    codes: Sequence[str]  # e.g. "Xid 13", "SXid 12028", "fallen off the bus"
    count: int
    workloads: Sequence[str]  # distinct process names (or pids) that faulted on this GPU
    gpu: str
    # Workloads from this group that also faulted on other GPUs, with those GPUs' count.
    workload_gpu_spread: dict[str, int]
    severity: str | None = None  # for PCIe AER: corrected / non-fatal / fatal
    recovery_action: str | None = None  # for Xid 154: the driver's latest recovery action
    # The decisive evidence of a hardware incident (`Evidence`): its most drastic code and what came before.
    evidence: Evidence | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """What decides an incident that is not an application fault, for its reason: its decisive code
    (the most drastic NVIDIA action, `models.decisive_action`), and the application faults the GPU had
    before it (jobs it failed, which made it suspect)."""

    decisive: str  # "Xid 48 (Double Bit ECC Error; NVIDIA: WORKFLOW_XID_48)"
    app_codes: Sequence[str] = ()  # the incident's application-class codes ("Xid 13")
    jobs_failed: int = 0  # distinct workloads whose application faults the incident holds
    span: str = ""  # how long the incident's faults took ("50 min")
    # Application-class codes the family's own reason leaves out (the jobs' faults, an Xid 45 that followed).
    not_own: Sequence[str] = ()

    def lead(self) -> str:
        """The decisive evidence in words: "the GPU failed 3 different jobs in 50 min (Xid 13), then Xid 48 (...)"."""
        if self.app_codes and self.jobs_failed:
            jobs = "1 job" if self.jobs_failed == 1 else f"{self.jobs_failed} different jobs"
            within = f" in {self.span}" if self.span else ""
            return f"the GPU failed {jobs}{within} ({', '.join(self.app_codes)}), then {self.decisive}"
        return self.decisive


@dataclass(frozen=True, slots=True)
class Verdict:
    category: str
    reason: str
    rule: str = "catalog"  # the rule that made it (stored with the verdict)


# The category a family decides whatever the catalog says (application and other faults: the catalog's).
_FAMILY_CATEGORY: dict[str, Category] = {
    Family.GPU_LOST: Category.HARDWARE,
    Family.MEMORY: Category.HARDWARE,
    Family.GPU_HARDWARE: Category.HARDWARE,
    Family.PCIE: Category.HARDWARE,
    Family.NVLINK: Category.INTERCONNECT,
    Family.NVSWITCH: Category.INTERCONNECT,
    Family.GSP: Category.HARDWARE,
    Family.DRIVER: Category.DRIVER,
    Family.THERMAL: Category.THERMAL,
    Family.RECOVERY_ACTION: Category.DRIVER,
}


def classify(group: FaultGroup, policy: ClassifyPolicy | None = None) -> Verdict:
    p = policy or ClassifyPolicy()
    codes = ", ".join(group.codes)
    if group.family == Family.APPLICATION:
        return _classify_application(group, p, codes)
    category: str | None = _FAMILY_CATEGORY.get(group.family)
    rule = f"family:{group.family}"
    if category is None:
        category = group.categories[0] if group.categories else Category.UNKNOWN
        rule = "catalog"
    ev = group.evidence
    # The codes and count the family's reason names: the jobs the GPU failed before are no memory errors
    # (the evidence names them).
    before = bool(ev and ev.app_codes)
    own = ", ".join(c for c in group.codes if not ev or (c not in ev.app_codes and c not in ev.not_own)) or codes
    times = "" if before else " once" if group.count == 1 else f" {group.count} times"
    reason = f"{own} seen{times or ''} on {group.gpu}"
    if group.family == Family.GPU_LOST:
        reason = f"GPU fell off the bus ({own}): the device no longer answers; hardware or PCIe path"
    elif group.family == Family.MEMORY:
        reason = f"GPU memory error ({own}){' seen' + times if times else ''} on {group.gpu}"
    elif group.family == Family.PCIE:
        reason = f"PCIe AER {group.severity or 'error'} reported{times} for {group.gpu} ({own})"
    elif group.family == Family.RECOVERY_ACTION and group.recovery_action:
        reason = f"the driver's GPU recovery action for {group.gpu} is now '{group.recovery_action}' ({own})"
    elif group.family == Family.GSP:
        reason = f"GPU System Processor failure ({own}){times} on {group.gpu}"
    if ev is not None:
        reason = f"{ev.lead()}: {reason}"
    return Verdict(category, reason, rule)


def classify_workload(codes: str, workload: str, gpus: int, nodes: int, count: int) -> Verdict:
    """An application fault of one workload (its own incident): the job's, never the hardware's."""
    where = f"{gpus} GPU{'s' if gpus != 1 else ''}" + (f" on {nodes} nodes" if nodes > 1 else "")
    if gpus > 1:
        return Verdict(Category.APPLICATION, f"{codes} from workload {workload} on {where} ({count} faults): the fault "
                       "follows the workload (a job that crashed or was torn down), not a GPU",
                       "application:follows-workload")
    return Verdict(Category.APPLICATION, f"{codes} from workload {workload} on {where} ({count} fault"
                   f"{'s' if count != 1 else ''}): an application error of that job", "application:workload")


def _classify_application(group: FaultGroup, p: ClassifyPolicy, codes: str) -> Verdict:
    distinct = sorted(set(group.workloads))
    followed = {w: n for w, n in group.workload_gpu_spread.items() if n >= 2}
    only_here = [w for w in distinct if w not in followed]
    if group.count >= p.repeat_threshold and len(only_here) >= p.min_distinct_workloads:
        return Verdict(
            Category.SUSPECTED_HARDWARE,
            f"{codes} repeated {group.count} times on {group.gpu} across {len(only_here)} different workloads "
            f"({', '.join(only_here)}) that faulted on no other GPU: the fault stays with the GPU",
            "application:stays-with-gpu",
        )
    if followed:
        spread = ", ".join(f"'{w}' on {n} GPUs" for w, n in sorted(followed.items()))
        others = f"; also {', '.join(only_here)} here" if only_here else ""
        return Verdict(
            Category.APPLICATION,
            f"{codes} on {group.gpu} from workloads that faulted on several GPUs ({spread}){others}: "
            "the fault follows the workload",
            "application:follows-workload",
        )
    if group.count >= p.repeat_threshold and not distinct:
        return Verdict(
            Category.SUSPECTED_HARDWARE,
            f"{codes} repeated {group.count} times on {group.gpu} with no process attribution: "
            "check whether different jobs hit it",
            "application:unattributed-repeats",
        )
    who = f"workload '{distinct[0]}'" if len(distinct) == 1 else "an unattributed process"
    if len(distinct) > 1:
        who = f"{len(distinct)} workloads ({', '.join(distinct)})"
    return Verdict(
        Category.APPLICATION,
        f"{codes} {group.count} time(s) on {group.gpu} from {who}, below the repeat threshold "
        f"of {p.repeat_threshold}: an application error",
        "application:below-threshold",
    )
