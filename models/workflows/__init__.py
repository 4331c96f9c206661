"""NVIDIA's workflows as decisions: each `WORKFLOW_*` resolution bucket of the Xid catalog, from
NVIDIA's text ("Fault Resolution Buckets" of docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
as a pure decision from an incident's reports to NVIDIA's action and why.

- `WORKFLOW_XID_13` (`xid13`): repeat TPC and GPC (diff SMs or a single SM): RUN_DCGMEUD, if pass
  RUN_FIELDDIAGS; solo, no burst, or not repeat TPC and GPC: CHECK_APP/CUDA.
- `WORKFLOW_XID_31` (`xid13`): repeat MMU faults to the same GPU: RUN_DCGMEUD, if pass
  RUN_FIELDDIAGS; to different GPUs, or solo: CHECK_APP/CUDA.
- `WORKFLOW_XID_45` (`xid48`): Solo: RESTART_FM; Not Solo: IGNORE (follow guidance in other Xid).
- `WORKFLOW_XID_48` (`xid48`): Solo: RESET_GPU; w/ 63 or 64: DRAIN_AND_RESET; investigate solo:
  RUN_FIELDDIAG; FB: follow Xid 63/64 guidance; SRAM: check the SRAM error threshold flag.
- `WORKFLOW_NVLINK_ERR` (`nvlink`): Xid 74, the registers of its line decoded bit by bit.
- `WORKFLOW_NVLINK5_ERR` (`nvlink5`): Xid 144-150, the sub-code and error status decoded ("XID 144-150
  Decode").

`decide` runs the workflow of a bucket on `WorkflowFacts` (the incident's Xid reports with their
messages and parsed details, and what its workload did on other GPUs); `workflow_of` names the bucket a
code's catalog row sends it to (immediate action first, then investigatory action). The incident's
reason states the decisive code's decision (`models.grouping.decisive_evidence`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from models.catalog import Catalog, load_catalog

# NVIDIA's page, whose "Fault Resolution Buckets" sheet every decision here cites.
SOURCE = "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True, slots=True)
class XidReport:
    """One Xid line of the incident: its code, the driver's message and the parser's details."""

    xid: int
    message: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkflowFacts:
    """What a workflow reads of an incident: its Xid reports (in time order) and, for an application
    Xid, on how many other GPUs the same workloads had it (`other_gpus`)."""

    reports: Sequence[XidReport]
    other_gpus: int = 0

    @property
    def xids(self) -> frozenset[int]:
        return frozenset(r.xid for r in self.reports)

    def of(self, xid: int) -> list[XidReport]:
        return [r for r in self.reports if r.xid == xid]


@dataclass(frozen=True, slots=True)
class WorkflowDecision:
    """A workflow's decision: NVIDIA's action (`action`: recovery or investigation, as NVIDIA names it),
    what to investigate after it (`investigate`, when the text says), and why, quoting the rule applied."""

    bucket: str
    action: str
    reason: str
    investigate: str | None = None

    def __str__(self) -> str:
        then = f", then {self.investigate}" if self.investigate else ""
        return f"{self.bucket}: {self.action}{then} ({self.reason})"


Workflow = Callable[[WorkflowFacts], WorkflowDecision | None]


def workflows() -> Mapping[str, Workflow]:
    """Every WORKFLOW_* bucket of the catalog, with its decision."""
    from models.workflows import nvlink, nvlink5, xid13, xid48

    return {
        "WORKFLOW_XID_13": xid13.workflow_xid_13,
        "WORKFLOW_XID_31": xid13.workflow_xid_31,
        "WORKFLOW_XID_45": xid48.workflow_xid_45,
        "WORKFLOW_XID_48": xid48.workflow_xid_48,
        "WORKFLOW_NVLINK_ERR": nvlink.workflow_nvlink_err,
        "WORKFLOW_NVLINK5_ERR": nvlink5.workflow_nvlink5_err,
    }


def workflow_of(xid: int, catalog: Catalog | None = None) -> str | None:
    """The WORKFLOW_* bucket the catalog row of `xid` names (its immediate action, else its investigatory one)."""
    info = (catalog or load_catalog()).xid(xid)
    if info is None:
        return None
    for name in (info.immediate_action, info.investigatory_action):
        if name is not None and str(name).startswith("WORKFLOW_"):
            return str(name)
    return None


def decide(bucket: str, facts: WorkflowFacts) -> WorkflowDecision | None:
    """The decision of `bucket`'s workflow on `facts`; None when the bucket has none or the facts hold no
    report it reads."""
    run = workflows().get(bucket)
    return run(facts) if run is not None else None
