"""An incident's NVIDIA action: the most severe of its codes' immediate actions.

An incident carries several codes (a GPU that failed jobs with Xid 13, then reported the contained
error Xid 94, the double-bit error Xid 48 and the row remapping Xid 63): NVIDIA's action for it is
the most severe of its codes' actions in NVIDIA's catalog, not the first code's. Severity is the
runbook's `order` (`models/catalog/runbook.yaml`, the most drastic first), the one order of NVIDIA's
actions: the runbook's primary entry and the decisive code follow it too.

- `decisive_action`: the decisive code (the first listed on a tie) and its action, with the reason;
  codes without an action in the catalog (an SXid, Xid 171/172, "fallen off the bus") are never
  decisive while another code has one, and neither are the codes NVIDIA says follow another Xid
  (`models.decisive.FOLLOWS_OTHER_XID`: Xid 45, "Not Solo: IGNORE (follow other Xid)"; Xid 154,
  "Informational only regarding another Xid ... always expected to be seen with another Xid requiring
  a recovery action", whose recovery the incident keeps apart as NVIDIA's current instruction). The
  choice itself is `models.decisive.decisive`'s, the one the words use too.
- `action_rank`: an action's place in that order (0: the most drastic).
- `decisive_evidence`: the decisive code in an incident's reason, with NVIDIA's action for it decided by
  its workflow (`models.workflows`) and the jobs the GPU failed before it; `application_workflow` and
  `with_workflow`: NVIDIA's workflow for an application incident's Xid 13 or 31, in its reason.

Pure: the catalog and the runbook are bundled data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from models.catalog import Catalog, XidInfo, load_catalog
from models.classify import Evidence, Verdict
from models.decisive import FOLLOWS_OTHER_XID, CodeFacts, decisive
from models.incidents import FaultObservation, IncidentState
from models.runbook import load_runbook
from models.vocabulary import (
    Category,
    CodeKind,
    FaultCode,
    ImmediateAction,
    code_text,
    stored_code,
)
from models.workflows import WorkflowDecision, WorkflowFacts, XidReport, decide, workflow_of


@dataclass(frozen=True, slots=True)
class DecisiveAction:
    """The code that decides an incident's NVIDIA action, the action, and the catalog row behind it."""

    code: FaultCode
    action: ImmediateAction
    info: XidInfo
    reason: str


def action_order() -> tuple[str, ...]:
    """NVIDIA's actions (and the runbook's class entries), the most drastic first."""
    return load_runbook().order


def action_rank(action: str, order: Sequence[str] | None = None) -> int:
    """The action's place in the runbook's order (0: the most drastic); an action outside it ranks last."""
    ranked = order if order is not None else action_order()
    return ranked.index(action) if action in ranked else len(ranked)


def decisive_action(codes: Iterable[FaultCode], catalog: Catalog | None = None,
                    order: Sequence[str] | None = None) -> DecisiveAction | None:
    """The code among `codes` whose catalog action is the most drastic, and that action, as the one choice
    of the decisive code makes it (`models.decisive.decisive`) among the Xids with an action in the
    catalog; None when no code has one."""
    cat = catalog or load_catalog()
    ranked = order if order is not None else action_order()
    acted: dict[FaultCode, XidInfo] = {}
    seen: list[FaultCode] = []
    for code in codes:
        if code in seen:
            continue
        seen.append(code)
        info = cat.xid(code.number) if code.kind is CodeKind.XID else None
        if info is not None and info.immediate_action is not None:
            acted[code] = info
    if not acted:
        return None
    chosen = decisive([CodeFacts(code_text(c), i.immediate_action) for c, i in acted.items()], ranked, cat)
    code = next(c for c in acted if code_text(c) == chosen.code)
    info = acted[code]
    action = info.immediate_action
    assert action is not None
    others = [code_text(c) for c in seen if c != code]
    reason = f"{code_text(code)} ({action}) is the most drastic of NVIDIA's actions" + (
        f" among {', '.join(others)}" if others else "")
    return DecisiveAction(code, action, info, reason)


def decisive_of_stored(codes: Iterable[str], catalog: Catalog | None = None) -> DecisiveAction | None:
    """`decisive_action` of an incident's stored codes ("Xid 48", "AER", ...), in the order it saw them."""
    return decisive_action((c for text in codes if (c := stored_code(str(text))) is not None), catalog)


# --- the decisive evidence, in an incident's reason ------------------------------------------------------


def workflow_facts(inc: IncidentState, observations: Sequence[FaultObservation], other_gpus: int = 0) -> WorkflowFacts:
    """What NVIDIA's workflows read of an incident: the Xid reports grouped into it in this run, with their
    messages and details, and its other codes (their presence is what some rules read: "w/ 63 or 64")."""
    reports = [XidReport(o.xid, o.message, o.details) for o in observations if o.xid is not None]
    have = {r.xid for r in reports}
    for text in inc.codes:
        code = stored_code(text)
        if code is not None and code.kind is CodeKind.XID and code.number not in have:
            reports.append(XidReport(code.number))
            have.add(code.number)
    return WorkflowFacts(reports, other_gpus)


def decisive_evidence(inc: IncidentState, workloads: Sequence[str],
                      observations: Sequence[FaultObservation] = ()) -> Evidence | None:
    """What decides an incident that is not an application fault: its decisive code and NVIDIA's action
    for it, decided by its workflow when the action is one (`models.workflows`: WORKFLOW_XID_48 with Xid 63
    is DRAIN_AND_RESET), and, when it holds application faults (a GPU found to keep failing jobs), how
    many different jobs it failed, in what time, before."""
    found = decisive_of_stored(inc.codes)
    if found is None:
        return None
    cat = load_catalog()
    application = [(text, info) for text in inc.codes if (c := stored_code(text)) is not None and c != found.code
                   and c.kind is CodeKind.XID and (info := cat.xid(c.number)) is not None
                   and info.category == Category.APPLICATION]
    # The jobs' own faults: an Xid 45 reports the cleanup after another fault, never a job that failed.
    app_codes = tuple(text for text, info in application if info.investigatory_action not in FOLLOWS_OTHER_XID)
    action = str(found.action)
    decided = decide(action, workflow_facts(inc, observations)) if action.startswith("WORKFLOW_") else None
    nvidia = f"{action} → {decided.action}: {decided.reason}" if decided is not None else action
    decisive = f"{found.code} ({found.info.description}; NVIDIA: {nvidia})"
    jobs = len(set(workloads)) if app_codes else 0
    return Evidence(decisive, app_codes, jobs, duration((inc.last_seen - inc.first_seen).total_seconds()),
                    tuple(text for text, _ in application))


def application_workflow(inc: IncidentState, observations: Sequence[FaultObservation],
                         other_gpus: int) -> WorkflowDecision | None:
    """NVIDIA's workflow for an application incident's Xid 13 or 31 (WORKFLOW_XID_13, WORKFLOW_XID_31: where
    the faults repeat), for the code it holds first; `other_gpus`: GPUs its workloads also faulted on."""
    facts = workflow_facts(inc, observations, other_gpus)
    for xid in (r.xid for r in facts.reports):
        bucket = workflow_of(xid)
        if bucket in ("WORKFLOW_XID_13", "WORKFLOW_XID_31"):
            return decide(bucket, facts)
    return None


def with_workflow(verdict: Verdict, decided: WorkflowDecision | None) -> Verdict:
    """The verdict with NVIDIA's workflow decision stated in its reason."""
    if decided is None:
        return verdict
    return Verdict(verdict.category, f"{verdict.reason}; NVIDIA {decided}", verdict.rule)


def duration(seconds: float) -> str:
    """A span in the unit people say it in: "45 s", "50 min", "20 h", "3 d"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"
