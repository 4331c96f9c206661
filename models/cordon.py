"""Cordon decisions: pure functions from (incident, node, fleet, breaker, policy) to a decision and
its reason. The adapter in `respond/cordon/` reads the cluster, calls these, and acts.

The ownership rule: a node is xidpipe's to cordon, annotate and release only while it carries
`xidpipe.io/cordoned-at` (written in the same patch as the cordon itself). A node made
unschedulable by anyone else is never touched, and such a cordon is never lifted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.catalog import Catalog, load_catalog
from models.cordon_policy import CordonPolicy, Match, Rule
from models.decisive_action import decisive_action
from models.quarantine import DeviceRef, GpuView, rule_name
from models.vocabulary import (
    FAMILIES,
    Category,
    CodeKind,
    CordonOutcome,
    Family,
    FaultCode,
    ImmediateAction,
    ReleaseOutcome,
    code_text,
)

# --- what xidpipe writes on a node ------------------------------------------------------------

ANN_CORDONED_AT = "xidpipe.io/cordoned-at"  # presence: xidpipe owns the node's cordon
ANN_INCIDENT = "xidpipe.io/incident"
ANN_FINGERPRINT = "xidpipe.io/fingerprint"
ANN_FAMILY = "xidpipe.io/family"
ANN_REASON = "xidpipe.io/cordon-reason"
ANN_OCCURRENCES = "xidpipe.io/occurrences"
CORDON_ANNOTATIONS = (ANN_CORDONED_AT, ANN_INCIDENT, ANN_FINGERPRINT, ANN_FAMILY, ANN_REASON, ANN_OCCURRENCES)
ANN_RELEASED_AT = "xidpipe.io/released-at"
ANN_RELEASED_BY = "xidpipe.io/released-by"
ANN_RELEASE_REASON = "xidpipe.io/release-reason"
ANN_RELEASED_INCIDENT = "xidpipe.io/released-incident"
TAINT_KEY = "xidpipe.io/gpu-fault"
TAINT_EFFECT = "NoSchedule"
CONDITION_TYPE = "GPUHealthy"
ANNOTATION_MAX = 1024  # our own cap on reason annotations (the API allows 256 KiB in total)

# Node Problem Detector style condition reasons per fault family.
CONDITION_REASONS: dict[str, str] = {
    Family.GPU_LOST: "GPUFallenOffBus", Family.MEMORY: "GPUMemoryError", Family.NVLINK: "NVLinkError",
    Family.NVSWITCH: "NVSwitchError", Family.PCIE: "PCIeError", Family.GSP: "GSPError",
    Family.APPLICATION: "GPUApplicationFault", Family.GPU_HARDWARE: "GPUHardwareError",
    Family.DRIVER: "GPUDriverError", Family.THERMAL: "GPUThermalError", Family.RECOVERY_ACTION: "GPURecoveryAction",
    Family.OTHER: "GPUFault",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PodRef(_Frozen):
    namespace: str
    name: str


class Occurrence(_Frozen):
    """One occurrence of an incident's component as a rule's `match` reads it: when it began, the Xids
    its reports carried (every sensor's view of it: a DBE's Xid 48 and 63, the Xid 45 of the job it
    killed) and the family of the report that counted it."""

    at: datetime
    xids: tuple[int, ...] = ()
    family: Family | None = None


class CordonRequest(BaseModel):
    """A request to cordon a node for one incident: what the stream emits, and all a decision needs.

    Redelivered copies are equal; a repeat of the incident carries a higher `count` (and a later
    `last_seen`). `occurrences` (optional) lists recent occurrence times for `cordon_after` windows;
    without it the window test uses `count` over `first_seen`..`last_seen`. `occurrence_facts`
    (optional) says what each recent occurrence was: a `cordon_after` rule then counts only the
    occurrences its `match` selects (`occurrences_in_window`).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = 1
    node: str = Field(min_length=1, max_length=253)
    incident_id: str = Field(min_length=1)
    fingerprint: str = ""
    gpu: str = Field(default="", description="GPU UUID, else PCI address")
    family: Family
    xids: tuple[int, ...] = ()
    category: Category = Category.UNKNOWN
    immediate_actions: tuple[ImmediateAction, ...] = ()
    count: int = Field(default=1, ge=1)
    first_seen: datetime
    last_seen: datetime
    occurrences: tuple[datetime, ...] = ()
    occurrence_facts: tuple[Occurrence, ...] = Field(
        default=(), description="what each recent occurrence was (its Xids, its family): what a rule counts")
    reason: str = Field(default="", description="the stream's reason for the request")
    pods: tuple[PodRef, ...] = Field(default=(), description="pods using the faulty GPU (drain candidates)")

    @field_validator("family", mode="before")
    @classmethod
    def _known_family(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in FAMILIES:  # it becomes the taint's value: only known names
            raise ValueError(f"unknown fault family {value!r}; known: {', '.join(FAMILIES)}")
        return value

    @property
    def codes(self) -> str:
        return ", ".join(code_text(FaultCode(CodeKind.XID, x)) for x in self.xids) or self.family


class IncidentLike(Protocol):
    """What `cordon_request_for` reads from an incident (e.g. `models.incidents.IncidentState`)."""

    @property
    def incident_id(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def gpu(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def first_seen(self) -> datetime: ...
    @property
    def last_seen(self) -> datetime: ...
    @property
    def category(self) -> str: ...
    @property
    def reason(self) -> str: ...


def cordon_request_for(
    incident: IncidentLike, *, codes: Sequence[FaultCode], pods: tuple[PodRef, ...] = (),
    occurrences: tuple[datetime, ...] = (), catalog: Catalog | None = None,
    occurrence_facts: tuple[Occurrence, ...] = (),
) -> CordonRequest:
    """The cordon request for an incident whose faults carried `codes`: their Xids, in order, and
    NVIDIA's immediate actions for them from the catalog; `occurrence_facts`, what its recent
    occurrences were (their times are `occurrences` when those are not given)."""
    cat = catalog or load_catalog()
    xids = tuple(code.number for code in codes if code.kind is CodeKind.XID)
    actions = tuple(dict.fromkeys(
        info.immediate_action for x in xids if (info := cat.xid(x)) is not None and info.immediate_action))
    return CordonRequest(
        node=incident.node, incident_id=incident.incident_id, fingerprint=incident.fingerprint, gpu=incident.gpu,
        family=Family(incident.family), xids=xids, category=Category(incident.category), immediate_actions=actions,
        count=incident.count, first_seen=incident.first_seen, last_seen=incident.last_seen,
        occurrences=occurrences or tuple(o.at for o in occurrence_facts), occurrence_facts=occurrence_facts,
        reason=incident.reason, pods=pods,
    )


class NodeView(_Frozen):
    """What a decision needs to know about the node, as read just before deciding."""

    name: str
    exists: bool = True
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    unschedulable: bool = False
    taint_keys: tuple[str, ...] = ()

    @property
    def cordoned_by_xidpipe(self) -> bool:
        return ANN_CORDONED_AT in self.annotations

    @property
    def xidpipe_incident(self) -> str | None:
        return self.annotations.get(ANN_INCIDENT)

    @property
    def recorded_occurrences(self) -> int:
        try:
            return int(self.annotations.get(ANN_OCCURRENCES, "0"))
        except ValueError:
            return 0


class FleetView(_Frozen):
    """The node's pool and what xidpipe has already done there (read from the cluster and the action record)."""

    pool: str = ""
    pool_nodes: int = Field(default=1, ge=0)
    pool_cordoned_by_xidpipe: int = Field(default=0, ge=0)
    cordons_last_hour: int = Field(default=0, ge=0, description="cordons and GPU quarantines, across the cluster")
    pool_nodes_quarantined: int = Field(
        default=0, ge=0, description="nodes of the pool with a GPU quarantined by xidpipe and no cordon of xidpipe")
    node_held: bool = Field(default=False, description="the node is one of those already")
    pool_gpus: int = Field(default=0, ge=0, description="GPU devices of the pool's nodes")
    pool_gpus_quarantined: int = Field(default=0, ge=0, description="of them, quarantined by xidpipe")

    @property
    def nodes_held(self) -> int:
        """The pool's nodes xidpipe holds: cordoned, or with a GPU quarantined."""
        return self.pool_cordoned_by_xidpipe + self.pool_nodes_quarantined


class BreakerState(_Frozen):
    tripped: bool = False
    tripped_at: datetime | None = None
    reason: str = ""
    pool: str | None = None
    reset_at: datetime | None = None
    reset_by: str | None = None
    reset_reason: str | None = None


class CordonDecision(_Frozen):
    outcome: CordonOutcome
    reason: str
    rule: str | None = None
    dry_run: bool = False
    scope: Literal["node", "gpu"] = Field(default="node", description="what the decision acts on")
    gpu: str = Field(default="", description="gpu scope: the GPU's UUID")
    device: DeviceRef | None = Field(default=None, description="gpu scope: the GPU's device")
    effect: str | None = Field(default=None, description="gpu scope: the taint's effect (None in a dry run)")
    rule_name: str | None = Field(default=None, description="gpu scope: the GPU's DeviceTaintRule")
    fallback: str | None = Field(default=None, description="why a quarantine_gpu rule cordons the node instead")
    resumes: bool = Field(default=False, description="gpu scope: the GPU's rule is this incident's, as written")

    @property
    def changes_node(self) -> bool:
        return self.outcome in (CordonOutcome.CORDON, CordonOutcome.REPEAT)

    @property
    def acts(self) -> bool:
        """It writes to the cluster: a cordon, a repeat or a GPU's quarantine."""
        return self.changes_node or self.outcome == CordonOutcome.QUARANTINE


# --- rules ---------------------------------------------------------------------------------------


def matches(match: Match, req: CordonRequest) -> bool:
    if match.families and req.family not in match.families:
        return False
    if match.xids and not set(match.xids) & set(req.xids):
        return False
    if match.categories and req.category not in match.categories:
        return False
    return not (match.immediate_actions and not set(match.immediate_actions) & set(req.immediate_actions))


def matching_rule(policy: CordonPolicy, req: CordonRequest) -> Rule | None:
    return next((r for r in policy.rules if matches(r.match, req)), None)


def occurrence_matches(match: Match, occ: Occurrence, req: CordonRequest, catalog: Catalog | None = None) -> bool:
    """Whether a rule's `match` selects one occurrence: its Xids (any of `xids`; `immediate_actions`: the
    catalog's actions for them) and its family; the category is the incident's (classification is)."""
    if match.families and (occ.family or req.family) not in match.families:
        return False
    if match.xids and not set(match.xids) & set(occ.xids):
        return False
    if match.categories and req.category not in match.categories:
        return False
    if match.immediate_actions:
        cat = catalog or load_catalog()
        actions = {info.immediate_action for x in occ.xids if (info := cat.xid(x)) is not None}
        return bool(set(match.immediate_actions) & actions)
    return True


def occurrences_in_window(req: CordonRequest, window_s: float, match: Match | None = None) -> tuple[int, str]:
    """How many occurrences of the incident fall within one window ending at its latest, and how that
    was counted. With `occurrence_facts` and a rule's `match`, only the occurrences the match selects
    count, in a window ending at the latest of them ("contained ECC twice in a day" counts Xid 94s, not
    the Xid 13s the same GPU had). With no occurrence times and a span longer than the window, the count
    is assumed spread evenly over the span."""
    if req.occurrence_facts and match is not None:
        times = [o.at for o in req.occurrence_facts if occurrence_matches(match, o, req)]
        if not times:
            return 0, f"none of its {len(req.occurrence_facts)} occurrence(s) matches the rule"
        end = max(times)
        n = sum(1 for t in times if 0 <= (end - t).total_seconds() <= window_s)
        return n, (f"{n} occurrence(s) matching the rule within {window_s:.0f} s "
                   f"({len(req.occurrence_facts)} in all)")
    if req.occurrences:
        end = max(req.occurrences)
        n = sum(1 for t in req.occurrences if 0 <= (end - t).total_seconds() <= window_s)
        return n, f"{n} occurrence(s) within {window_s:.0f} s"
    span = max(0.0, (req.last_seen - req.first_seen).total_seconds())
    if span <= window_s:
        return req.count, f"{req.count} occurrence(s) within {span:.0f} s (window {window_s:.0f} s)"
    n = math.floor(req.count * window_s / span + 1e-9)
    return n, f"{req.count} occurrence(s) over {span:.0f} s, about {n} per {window_s:.0f} s window"


def policy_verdict(policy: CordonPolicy, req: CordonRequest) -> tuple[bool, str, str | None]:
    """(the policy asks for a cordon, why, the deciding rule's name)."""
    rule = matching_rule(policy, req)
    if rule is None:
        return False, f"no rule matches {req.codes} ({req.family}, {req.category}): default never", None
    if rule.action == "never":
        return False, f"rule {rule.name}: never cordon for {req.codes} ({req.category})", rule.name
    if rule.action == "cordon_now":
        return True, f"rule {rule.name}: cordon at once for {_decisive_codes(rule, req)}", rule.name
    if rule.quarantines and rule.occurrences is None:
        return True, f"rule {rule.name}: quarantine the GPU at once for {_decisive_codes(rule, req)}", rule.name
    assert rule.occurrences is not None and rule.window_s is not None
    n, how = occurrences_in_window(req, rule.window_s, rule.match)
    if n >= rule.occurrences:
        return True, f"rule {rule.name}: {how}, threshold {rule.occurrences}", rule.name
    return False, f"rule {rule.name}: {how}, below the threshold of {rule.occurrences}", rule.name


def _decisive_codes(rule: Rule, req: CordonRequest) -> str:
    """The codes a cordon is for: those the rule's match names, else the incident's decisive code
    (`models.decisive_action`), with its family and NVIDIA's action ("Xid 48 (memory; NVIDIA: WORKFLOW_XID_48)")."""
    xids = [x for x in req.xids if x in rule.match.xids] or list(req.xids)
    found = decisive_action(FaultCode(CodeKind.XID, x) for x in xids)
    if found is None:
        return f"{req.codes} ({req.family})"
    return f"{found.code} ({req.family}; NVIDIA: {found.action})"


# --- scope and breaker ---------------------------------------------------------------------------


def pool_of(policy: CordonPolicy, labels: dict[str, str]) -> str:
    return labels.get(policy.scope.pool_label, "")


def scope_refusal(policy: CordonPolicy, node: NodeView) -> tuple[CordonOutcome, str] | None:
    scope = policy.scope
    if node.labels.get(scope.opt_out_label, "").lower() == "true":
        return CordonOutcome.OPTED_OUT, f"node {node.name} is labelled {scope.opt_out_label}=true"
    outside = CordonOutcome.OUT_OF_SCOPE
    pool = pool_of(policy, node.labels)
    if scope.pools and pool not in scope.pools:
        return outside, f"node {node.name} is in pool '{pool}', not in the policy's pools {list(scope.pools)}"
    model = node.labels.get(scope.gpu_model_label)
    if scope.gpu_models and model not in scope.gpu_models:
        return outside, (f"node {node.name} has GPU model '{model or 'unknown'}', not in the policy's "
                         f"gpu_models {list(scope.gpu_models)}")
    missing = {k: v for k, v in scope.node_selector.items() if node.labels.get(k) != v}
    if missing:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(missing.items()))
        return outside, f"node {node.name} does not match the node selector ({shown})"
    return None


def pool_allowance(policy: CordonPolicy, pool_nodes: int) -> int:
    """Nodes of a pool xidpipe may hold cordoned at once."""
    share = math.floor(policy.breaker.max_pool_share * pool_nodes + 1e-9)
    return max(policy.breaker.min_nodes, share)


def breaker_limit(policy: CordonPolicy, fleet: FleetView, *, gpus: bool = False) -> str | None:
    """Why one more cordon (or, with `gpus`, one more GPU quarantine) would pass the breaker's limits,
    or None. A pool's share is counted in the nodes xidpipe holds (cordoned, or with a GPU quarantined;
    a node already held adds none) and, for a quarantine, in its quarantined GPUs too."""
    allowed = pool_allowance(policy, fleet.pool_nodes)
    held, more = fleet.nodes_held, 0 if fleet.node_held else 1
    if held + more > allowed:
        what = "cordoned by xidpipe" if not fleet.pool_nodes_quarantined else \
            "held by xidpipe (cordoned, or with a GPU quarantined)"
        return (f"pool '{fleet.pool}' has {held} of {fleet.pool_nodes} nodes {what}; one more would pass the "
                f"limit of {allowed} ({policy.breaker.max_pool_share:.0%}, at least {policy.breaker.min_nodes})")
    if gpus:
        share = math.floor(policy.breaker.max_pool_share * fleet.pool_gpus + 1e-9)
        allowed_gpus = max(policy.breaker.min_gpus, share)
        if fleet.pool_gpus_quarantined + 1 > allowed_gpus:
            return (f"pool '{fleet.pool}' has {fleet.pool_gpus_quarantined} of {fleet.pool_gpus} GPUs quarantined by "
                    f"xidpipe; one more would pass the limit of {allowed_gpus} "
                    f"({policy.breaker.max_pool_share:.0%}, at least {policy.breaker.min_gpus})")
    if fleet.cordons_last_hour + 1 > policy.breaker.max_per_hour:
        kinds = "cordons and GPU quarantines" if gpus else "cordons"
        return (f"{fleet.cordons_last_hour} {kinds} by xidpipe in the last hour; one more would pass the limit of "
                f"{policy.breaker.max_per_hour} per hour")
    return None


# --- the decisions -------------------------------------------------------------------------------


def decide_cordon(
    req: CordonRequest,
    node: NodeView,
    fleet: FleetView,
    breaker: BreakerState,
    policy: CordonPolicy,
    *,
    dry_run: bool = False,
    gpu: GpuView | None = None,
) -> CordonDecision:
    """Cordon (or, for a `quarantine_gpu` rule, quarantine the GPU) or not, and why. Safe under
    redelivery: a request already carried out decides `already_cordoned` (`already_quarantined`),
    which changes nothing.

    `gpu`: the incident's GPU as the DRA caches know it; a quarantine_gpu rule whose GPU is not a DRA
    device (None: not looked up) cordons the node instead, and the decision says why (`fallback`)."""
    dry = dry_run or policy.dry_run
    wanted, why, rule = policy_verdict(policy, req)
    matched = matching_rule(policy, req)
    fallback: str | None = None
    o = CordonOutcome
    if wanted and node.exists and matched is not None and matched.quarantines:
        view = gpu or GpuView(uuid=req.gpu)
        if view.device is not None:
            return _decide_quarantine(req, node, fleet, breaker, policy, view, matched, why, dry)
        fallback = view.unresolved
        why = f"{why}; {fallback}: the node is cordoned instead"

    def out(outcome: CordonOutcome, reason: str) -> CordonDecision:
        return CordonDecision(outcome=outcome, reason=reason, rule=rule, dry_run=dry, fallback=fallback)

    if not wanted:
        return out(o.NOT_NEEDED, why)
    if not node.exists:
        return out(o.NODE_MISSING, f"node {node.name} does not exist; {why}")
    if node.cordoned_by_xidpipe:
        mine = node.xidpipe_incident
        if mine != req.incident_id:
            return out(o.ALREADY_CORDONED, f"node {node.name} is already cordoned by xidpipe for incident {mine}")
        if req.count > node.recorded_occurrences:
            return out(o.REPEAT, f"incident {req.incident_id} repeated ({req.count} occurrences); node already "
                                 "cordoned by xidpipe")
        return out(o.ALREADY_CORDONED, f"node {node.name} is already cordoned by xidpipe for this incident")
    if node.unschedulable:
        return out(o.FOREIGN_CORDON, f"node {node.name} was cordoned by someone else (no {ANN_CORDONED_AT} "
                                     "annotation): xidpipe leaves it alone")
    return _guarded(out, o.CORDON, why, policy, node, fleet, breaker, gpus=False)


Decide = Callable[[CordonOutcome, str], CordonDecision]


def _guarded(out: Decide, outcome: CordonOutcome, why: str, policy: CordonPolicy, node: NodeView, fleet: FleetView,
             breaker: BreakerState, *, gpus: bool) -> CordonDecision:
    """`outcome` unless the scope, the tripped breaker or its limits refuse it."""
    refusal = scope_refusal(policy, node)
    if refusal is not None:
        return out(refusal[0], f"{refusal[1]}; {why}")
    if breaker.tripped:
        return out(CordonOutcome.BREAKER_OPEN, f"cordon circuit breaker tripped at "
                                               f"{breaker.tripped_at.isoformat() if breaker.tripped_at else '?'} "
                                               f"({breaker.reason}); an operator must reset it; {why}")
    limit = breaker_limit(policy, fleet, gpus=gpus)
    if limit is not None:
        held = "quarantine" if gpus else "cordon"
        return out(CordonOutcome.TRIP_BREAKER,
                   f"{limit}: breaker trips, no automatic {held} until reset; {why}")
    return out(outcome, why)


def _decide_quarantine(req: CordonRequest, node: NodeView, fleet: FleetView, breaker: BreakerState,
                       policy: CordonPolicy, gpu: GpuView, rule: Rule, why: str, dry: bool) -> CordonDecision:
    """A quarantine_gpu rule whose GPU is a DRA device: one DeviceTaintRule on it (effect `None` in a
    dry run), under the same scope and breaker as a cordon, counted in GPUs as well as nodes."""
    effect = "None" if dry else rule.taint_effect
    name = rule_name(gpu.uuid)
    o = CordonOutcome

    def out(outcome: CordonOutcome, reason: str, resumes: bool = False) -> CordonDecision:
        return CordonDecision(outcome=outcome, reason=reason, rule=rule.name, dry_run=dry, scope="gpu", gpu=gpu.uuid,
                              device=gpu.device, effect=effect, rule_name=name, resumes=resumes)

    existing = gpu.rule
    if existing is not None:
        changed = existing.changed
        if changed is not None:
            return out(o.FOREIGN_QUARANTINE, f"the rule {name} of GPU {gpu.uuid} was changed by someone else "
                                             f"({changed}): xidpipe leaves it alone")
        if existing.incident_id != req.incident_id:
            return out(o.ALREADY_QUARANTINED, f"GPU {gpu.uuid} is already quarantined by xidpipe for incident "
                                              f"{existing.incident_id} (rule {name})")
        if existing.effect == effect:
            return out(o.ALREADY_QUARANTINED, f"GPU {gpu.uuid} is already quarantined by xidpipe for this incident "
                                              f"(rule {name}, effect {effect})", resumes=True)
        if existing.effective:  # one effective effect for another, or a dry run's None: nothing more held
            return out(o.QUARANTINE, f"{why}; rule {name}: effect {existing.effect} becomes {effect}")
    assert gpu.device is not None
    where = f"{gpu.device.text}, rule {name}, effect {effect}"
    return _guarded(out, o.QUARANTINE, f"{why}; GPU {gpu.uuid} is {where}", policy, node, fleet, breaker, gpus=True)


class ReleaseDecision(_Frozen):
    outcome: ReleaseOutcome
    reason: str


def decide_release(node: NodeView, incident_id: str | None) -> ReleaseDecision:
    """Lift xidpipe's cordon, only when xidpipe set it (and for the named incident, when one is given)."""
    o = ReleaseOutcome
    if not node.exists:
        return ReleaseDecision(outcome=o.NODE_MISSING, reason=f"node {node.name} does not exist")
    if not node.cordoned_by_xidpipe:
        if node.unschedulable:
            return ReleaseDecision(outcome=o.REFUSE, reason=(
                f"node {node.name} is cordoned, but not by xidpipe (no {ANN_CORDONED_AT} annotation): "
                "xidpipe lifts only its own cordons; uncordon it with kubectl if that is intended"))
        return ReleaseDecision(outcome=o.REFUSE, reason=f"node {node.name} carries no cordon by xidpipe")
    mine = node.xidpipe_incident
    if incident_id is not None and incident_id != mine:
        return ReleaseDecision(outcome=o.REFUSE, reason=(
            f"node {node.name} is cordoned by xidpipe for incident {mine}, not {incident_id}"))
    return ReleaseDecision(outcome=o.RELEASE, reason=f"lift xidpipe's cordon for incident {mine}")


# --- what the node should look like (wire-format dicts, camelCase) -------------------------------


def with_our_taint(taints: list[dict[str, Any]], family: str) -> list[dict[str, Any]] | None:
    """The taint list with xidpipe's taint for `family` (every other taint kept, in order), or None
    when it is already there."""
    ours = {"key": TAINT_KEY, "value": family, "effect": TAINT_EFFECT}
    present = [t for t in taints if t.get("key") == TAINT_KEY and t.get("effect") == TAINT_EFFECT]
    if present and present[0].get("value") == family and len(present) == 1:
        return None
    others = [t for t in taints if not (t.get("key") == TAINT_KEY and t.get("effect") == TAINT_EFFECT)]
    return [*others, ours]


def without_our_taint(taints: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    kept = [t for t in taints if t.get("key") != TAINT_KEY]
    return None if len(kept) == len(taints) else kept


def cordon_annotations(req: CordonRequest, decision: CordonDecision, at: datetime) -> dict[str, str]:
    return {
        ANN_CORDONED_AT: at.isoformat(),
        ANN_INCIDENT: req.incident_id,
        ANN_FINGERPRINT: req.fingerprint,
        ANN_FAMILY: req.family,
        ANN_REASON: decision.reason[:ANNOTATION_MAX],
        ANN_OCCURRENCES: str(req.count),
    }


def condition_reason(family: str) -> str:
    return CONDITION_REASONS.get(family, "GPUFault")


def condition_message(req: CordonRequest) -> str:
    gpu = f" on {req.gpu}" if req.gpu else ""
    text = f"{req.codes}{gpu}: cordoned by xidpipe for incident {req.incident_id}"
    if req.reason:
        text += f" ({req.reason})"
    return text[:ANNOTATION_MAX]
