"""One account of an incident: what was decided about its node, what NVIDIA asks for, what was kept,
and whom it hit, each from a record.

Every sink says these things (the ticket in Jira wiki markup, ADF and the outbox's Markdown, the chat
message, the incident page and the API): each reads them here, so none can say "cordoned" beside a
decision that cordoned nothing.

- The **decision** about the node comes from the action record: the latest record of the cordon
  decision (`cordon`, `repeat`) or its release, with the decision's own outcome
  (`models.vocabulary.CordonOutcome`), what the action came to (`ActionOutcome`), its reason and
  whether it was a dry run. `Decision` names what that means for the node (`decision_of`).
- **NVIDIA's action** is the decisive code's (`models.decisive`).
- The **evidence** is what the dossier holds (name, where it was captured, how it went).
- The **affected workloads** are the workloads the incident's faults hit: every pod its fault
  records name (the dossier's `affected`), else the one the attribution names, each with its
  namespace and owner; `models.affected_notice` tells each its own team.

Pure: pydantic and the vocabulary only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from models.decisive import Decisive
from models.vocabulary import ActionOutcome, ComponentKind, CordonOutcome, values

CORDON_ACTIONS = frozenset({"cordon", "repeat", "quarantine"})  # the action kinds the cordon decision records
RELEASE = "release"
EVICT = "evict"  # the drain step's record (respond/cordon/steps/drain.py)


class Decision(StrEnum):
    """What the cordon decision came to for the incident's node."""

    CORDONED = "cordoned"  # xidpipe cordoned the node (for this incident, or holds it for another)
    DRY_RUN = "dry_run"  # the policy asks for a cordon; dry run: nothing was written to the cluster
    NOT_NEEDED = "not_needed"  # the policy does not ask for a cordon (the reason says which rule)
    HELD = "held"  # the cordon circuit breaker held the cordon back
    REFUSED = "refused"  # wanted, but not xidpipe's to do: someone else's cordon, opted out, out of scope, no node
    FAILED = "failed"  # the cordon was tried and failed (it is retried when the error allows)
    RELEASED = "released"  # xidpipe lifted its cordon of the node (or its quarantine of the GPU)
    QUARANTINED = "quarantined"  # xidpipe quarantined the GPU (a DeviceTaintRule); the node stays schedulable
    PENDING = "pending"  # no decision recorded yet
    NOT_OFFERED = "not_offered"  # the incident is never offered a cordon (a workload's or the fleet's)


# The decisions for which the policy asked for a cordon: the API's `cordon_requested`.
REQUESTED = frozenset({Decision.CORDONED, Decision.DRY_RUN, Decision.HELD, Decision.REFUSED, Decision.FAILED,
                       Decision.RELEASED})
_QUARANTINE_OUTCOMES = frozenset({CordonOutcome.QUARANTINE, CordonOutcome.ALREADY_QUARANTINED,
                                  CordonOutcome.FOREIGN_QUARANTINE})
RELEASES = frozenset({"release", "unquarantine"})  # the actions that lift what a decision wrote
_BY_OUTCOME: dict[str, Decision] = {
    CordonOutcome.CORDON: Decision.CORDONED, CordonOutcome.REPEAT: Decision.CORDONED,
    CordonOutcome.ALREADY_CORDONED: Decision.CORDONED, CordonOutcome.NOT_NEEDED: Decision.NOT_NEEDED,
    CordonOutcome.BREAKER_OPEN: Decision.HELD, CordonOutcome.TRIP_BREAKER: Decision.HELD,
    CordonOutcome.FOREIGN_CORDON: Decision.REFUSED, CordonOutcome.OPTED_OUT: Decision.REFUSED,
    CordonOutcome.OUT_OF_SCOPE: Decision.REFUSED, CordonOutcome.NODE_MISSING: Decision.REFUSED,
    CordonOutcome.QUARANTINE: Decision.QUARANTINED, CordonOutcome.ALREADY_QUARANTINED: Decision.QUARANTINED,
    CordonOutcome.FOREIGN_QUARANTINE: Decision.REFUSED,
}
_CORDON_OUTCOMES = frozenset(values(CordonOutcome))


class ActionItem(BaseModel):
    """One recorded action of the incident (the action record's row), as the dossier carries it."""

    at: datetime
    action: str  # cordon, repeat, release, evict, breaker_trip, ...
    outcome: str  # what it came to: an `ActionOutcome` (done, dry_run, skipped, blocked, failed, ...)
    actor: str = "xidpipe"
    decision: str | None = None  # the decision's own outcome (a `CordonOutcome`: cordon, not_needed, ...)
    reason: str = ""  # the decision's reason
    dry_run: bool = False
    detail: str = ""  # "<decision>: <reason>", as shown in the actions table

    def decision_outcome(self) -> str | None:
        """The decision's outcome; a record from before dossier version 2 names it in `detail`."""
        if self.decision:
            return self.decision
        head, sep, _ = self.detail.partition(": ")
        return head if sep and head in _CORDON_OUTCOMES else None


class EvidenceRef(BaseModel):
    """One piece of evidence the dossier holds."""

    name: str
    source: str  # node, cluster
    status: str  # ok, timeout, absent, failed
    captured_at: datetime | None = None


class AffectedWorkload(BaseModel):
    """A workload the incident's faults hit."""

    workload: str | None = None
    namespace: str | None = None
    pod: str | None = None
    owner: str | None = None


class Account(BaseModel):
    """The incident's account: every sink states these, and only these."""

    model_config = ConfigDict(frozen=True)

    node: str
    decision: Decision
    cordon_outcome: str | None = Field(default=None, description="the cordon decision's own outcome")
    action_outcome: str | None = Field(default=None, description="what the recorded action came to")
    reason: str = Field(description="the decision's own reason, or why there is none")
    dry_run: bool = False
    decided_at: datetime | None = None
    drained: bool = Field(default=False, description="the drain step evicted the node's pods after the cordon")
    cordon_requested: bool = Field(description="the cordon policy asked for a cordon of the node")
    decisive_code: str | None = None
    nvidia_action: str | None = Field(default=None, description="NVIDIA's action for the decisive code")
    recovery_action: str | None = Field(default=None, description="the latest Xid 154 recovery action, in the "
                                        "driver's words")
    evidence: tuple[EvidenceRef, ...] = ()
    affected: tuple[AffectedWorkload, ...] = ()

    @property
    def node_cordoned(self) -> bool:
        """The node is held cordoned by xidpipe (as the latest decision left it)."""
        return self.decision is Decision.CORDONED


def decision_of(actions: Sequence[ActionItem], component: str) -> tuple[Decision, ActionItem | None]:
    """What the latest cordon decision (or release) recorded for the incident came to, and its record."""
    if component in (ComponentKind.WORKLOAD, ComponentKind.FLEET):
        return Decision.NOT_OFFERED, None
    latest = max((a for a in actions if a.action in CORDON_ACTIONS), key=lambda a: a.at, default=None)
    released = max((a for a in actions if a.action in RELEASES and a.outcome == ActionOutcome.DONE),
                   key=lambda a: a.at, default=None)
    if released is not None and (latest is None or released.at >= latest.at):
        return Decision.RELEASED, released
    if latest is None:
        return Decision.PENDING, None
    outcome = latest.decision_outcome()
    if outcome == CordonOutcome.NODE_MISSING:  # recorded as failed, but nothing was tried
        return Decision.REFUSED, latest
    if latest.outcome == ActionOutcome.FAILED:
        return Decision.FAILED, latest
    decided = _BY_OUTCOME.get(outcome or "", Decision.PENDING)
    if decided in (Decision.CORDONED, Decision.QUARANTINED) and latest.outcome in (ActionOutcome.DRY_RUN, "dry-run"):
        return Decision.DRY_RUN, latest  # a cordon, repeat or quarantine decided, nothing enforced
    return decided, latest


def _why_none(decision: Decision, component: str) -> str:
    if decision is Decision.NOT_OFFERED:
        return ("an application fault follows its job, not the node: its node is not cordoned for it"
                if component == ComponentKind.WORKLOAD else
                "a fleet incident spans many nodes: each node's own incident has its own cordon decision")
    return "the responder has recorded no cordon decision for this incident so far"


def build_account(*, node: str, component: str, actions: Sequence[ActionItem], decisive: Decisive,
                  evidence: Sequence[EvidenceRef] = (), affected: Sequence[AffectedWorkload] = ()) -> Account:
    """The incident's account from its records: the action record's rows, the decisive code, the evidence
    held, the workloads hit."""
    decision, record = decision_of(actions, component)
    reason = (record.reason or record.detail.partition(": ")[2] or record.detail) if record else ""
    return Account(
        node=node, decision=decision,
        cordon_outcome=("unquarantine" if record.action == "unquarantine" else record.decision_outcome()) if record
        else None,
        action_outcome=record.outcome if record else None, reason=reason or _why_none(decision, component),
        dry_run=bool(record and (record.dry_run or record.outcome in (ActionOutcome.DRY_RUN, "dry-run"))),
        decided_at=record.at if record else None, cordon_requested=decision in REQUESTED,
        drained=decision is Decision.CORDONED and any(
            a.action == EVICT and a.outcome == ActionOutcome.DONE and (record is None or a.at >= record.at)
            for a in actions),
        decisive_code=decisive.code, nvidia_action=decisive.action,
        recovery_action=decisive.recovery.text if decisive.recovery else None,
        evidence=tuple(evidence), affected=tuple(affected),
    )


# --- what every sink says about it ----------------------------------------------------------------

_HEADLINE = {
    Decision.CORDONED: "Cordoned",
    Decision.DRY_RUN: "Not cordoned (dry run)",
    Decision.NOT_NEEDED: "Not cordoned (not needed)",
    Decision.HELD: "Not cordoned (held by the circuit breaker)",
    Decision.REFUSED: "Not cordoned by xidpipe",
    Decision.FAILED: "Cordon failed",
    Decision.RELEASED: "Cordon lifted",
    Decision.QUARANTINED: "GPU quarantined",
    Decision.PENDING: "No cordon decision yet",
    Decision.NOT_OFFERED: "No cordon",
}


def headline(a: Account) -> str:
    """The decision in a few words: "Cordoned", "Not cordoned (dry run)", ..."""
    return _HEADLINE[a.decision]


def decision_text(a: Account) -> str:
    """The decision in one sentence, with its own reason."""
    if a.decision in (Decision.PENDING, Decision.NOT_OFFERED):
        return f"{headline(a)}: {a.reason}."
    node = a.node
    if a.cordon_outcome in _QUARANTINE_OUTCOMES or a.cordon_outcome == "unquarantine":
        return _quarantine_text(a)
    text = {
        Decision.CORDONED: f"xidpipe cordoned {node}",
        Decision.DRY_RUN: f"the cordon policy asks to cordon {node}, but cordons run as a dry run, so nothing was "
                          "written to the cluster",
        Decision.NOT_NEEDED: f"the cordon policy asks for no cordon of {node}, which stays schedulable",
        Decision.HELD: f"the cordon circuit breaker held the cordon of {node} back",
        Decision.REFUSED: f"xidpipe did not cordon {node}",
        Decision.FAILED: f"xidpipe's cordon of {node} failed",
        Decision.RELEASED: f"xidpipe lifted its cordon of {node}",
    }[a.decision]
    return f"{headline(a)}: {text} ({a.reason})."


def _quarantine_text(a: Account) -> str:
    """The sentence of a decision about one GPU (a `quarantine_gpu` rule), not the node."""
    node = a.node
    text = {
        Decision.QUARANTINED: f"xidpipe quarantined the GPU on {node} with a DeviceTaintRule; the node stays "
                              "schedulable for its other GPUs",
        Decision.DRY_RUN: f"the cordon policy asks to quarantine the GPU on {node}, but it runs as a dry run, so "
                          "the GPU's DeviceTaintRule takes no effect",
        Decision.REFUSED: f"xidpipe did not quarantine the GPU on {node}: its DeviceTaintRule was changed by "
                          "someone else",
        Decision.FAILED: f"xidpipe's quarantine of the GPU on {node} failed",
        Decision.RELEASED: f"xidpipe lifted its quarantine of the GPU on {node}",
    }.get(a.decision, f"the GPU on {node} was not quarantined")
    return f"{headline(a)}: {text} ({a.reason})."


def action_text(a: Account) -> str:
    """NVIDIA's action for the decisive code, in one line ("" when the catalog names none)."""
    if not a.nvidia_action:
        return f"{a.decisive_code}: no NVIDIA action in the catalog" if a.decisive_code else ""
    return f"{a.nvidia_action} for {a.decisive_code}"
