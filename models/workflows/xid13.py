"""WORKFLOW_XID_13 and WORKFLOW_XID_31: application faults that may point at the GPU.

NVIDIA's text (Fault Resolution Buckets):

WORKFLOW_XID_13: "Repeat TPC and GPC, diff SMs: RUN_DCGMEUD (possible HW issue); if pass
RUN_FIELDDIAGS. Repeat TPC and GPC, single SM: RUN_DCGMEUD (possible HW issue); if pass
RUN_FIELDDIAGS. Solo, no burst: CHECK_APP/CUDA. Not Repeat TPC and GPC: CHECK_APP/CUDA. Non-prod
environment: CHECK_APP/CUDA. If known good APP and Solo: REPORT_ISSUE"

WORKFLOW_XID_31: "Multiple runs needed to establish pattern. Repeat MMU faults to same GPU (via
PCI-ID): RUN_DCGMEUD (possible HW issue); if pass RUN_FIELDDIAGS. Repeat MMU faults to diff GPU (via
PCI-ID): CHECK_APP/CUDA. Solo, no burst: CHECK_APP/CUDA. If known good APP: REPORT_ISSUE"

The location of an Xid 13 is the `(GPC g, TPC t, SM s)` the driver prints (the parser's `gpc`, `tpc`,
`sm`). Whether an application is "known good" or the environment is non-production is not in the log:
those rows are left to the operator.
"""

from __future__ import annotations

from collections import defaultdict

from models.workflows import WorkflowDecision, WorkflowFacts

RUN_DIAGS = "RUN_DCGMEUD"
IF_PASS = "RUN_FIELDDIAGS"
CHECK_APP = "CHECK_APP/CUDA"


def workflow_xid_13(facts: WorkflowFacts) -> WorkflowDecision | None:
    """Xid 13 by where on the chip it repeats (GPC, TPC, SM)."""
    reports = facts.of(13)
    if not reports:
        return None
    bucket = "WORKFLOW_XID_13"
    if len(reports) == 1:
        return WorkflowDecision(bucket, CHECK_APP, "Solo, no burst: CHECK_APP/CUDA")
    sms: dict[tuple[int, int], set[int | None]] = defaultdict(set)
    for r in reports:
        gpc, tpc = r.details.get("gpc"), r.details.get("tpc")
        if isinstance(gpc, int) and isinstance(tpc, int):
            sm = r.details.get("sm")
            sms[(gpc, tpc)].add(sm if isinstance(sm, int) else None)
    counts = {loc: sum(1 for r in reports if (r.details.get("gpc"), r.details.get("tpc")) == loc) for loc in sms}
    repeated = sorted(loc for loc, n in counts.items() if n >= 2)
    if repeated:
        gpc, tpc = repeated[0]
        which = "single SM" if len(sms[(gpc, tpc)]) == 1 else "diff SMs"
        return WorkflowDecision(bucket, RUN_DIAGS, f"Repeat TPC and GPC ({len(reports)} faults, GPC {gpc} TPC {tpc}), "
                                f"{which}: RUN_DCGMEUD (possible HW issue); if pass RUN_FIELDDIAGS", IF_PASS)
    if sms:
        return WorkflowDecision(bucket, CHECK_APP, f"Not Repeat TPC and GPC ({len(reports)} faults at "
                                f"{len(sms)} places): CHECK_APP/CUDA")
    return WorkflowDecision(bucket, CHECK_APP,
                            f"{len(reports)} faults without a TPC and GPC to compare: CHECK_APP/CUDA")


def workflow_xid_31(facts: WorkflowFacts) -> WorkflowDecision | None:
    """Xid 31 by where it repeats: on this GPU, or following its workload to other GPUs."""
    reports = facts.of(31)
    if not reports:
        return None
    bucket = "WORKFLOW_XID_31"
    if facts.other_gpus > 0:
        return WorkflowDecision(bucket, CHECK_APP, f"Repeat MMU faults to diff GPU (the workload on "
                                f"{facts.other_gpus} other GPU(s)): CHECK_APP/CUDA")
    if len(reports) >= 2:
        return WorkflowDecision(bucket, RUN_DIAGS, f"Repeat MMU faults to same GPU ({len(reports)} faults): "
                                "RUN_DCGMEUD (possible HW issue); if pass RUN_FIELDDIAGS", IF_PASS)
    return WorkflowDecision(bucket, CHECK_APP, "Solo, no burst: CHECK_APP/CUDA")
