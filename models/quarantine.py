"""GPU quarantine: one faulty GPU taken out of scheduling with a DRA DeviceTaintRule
(resource.k8s.io/v1, KEP-5055) instead of its node cordoned. Pure values and decisions; the adapter
in `respond/quarantine/` reads the cluster and writes the rules.

A GPU is a device of its node's ResourceSlice: NVIDIA's DRA driver publishes driver
`gpu.nvidia.com`, pool = the node's name, device `gpu-<minor>`, with the GPU's UUID in the attribute
`uuid`. A rule `{deviceSelector: {driver, pool, device}, taint: {key, value, effect}}` taints that one
device: the scheduler keeps new claims off it (`NoSchedule`), the device-taint-eviction controller
also evicts the pods holding it (`NoExecute`), and `None` disturbs nothing while its status reports
what `NoExecute` would evict (xidpipe's dry run).

The ownership rule, as for cordons: a rule is xidpipe's when it carries the label
`app.kubernetes.io/managed-by=xidpipe`, and xidpipe wrote what its annotations say (`xidpipe.io/effect`,
`xidpipe.io/device`). A rule whose spec no longer says what xidpipe wrote was changed by someone: it
is left alone and reported, never rewritten or deleted by xidpipe.

One rule per GPU, named after the GPU (`rule_name`), so a redelivery or a repeat finds it (the
create answers 409) instead of adding another; it is labelled with the incident.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.vocabulary import ReleaseOutcome

RULE_PREFIX = "xidpipe-gpu-"
TAINT_KEY = "xidpipe.io/gpu-fault"  # the node taint's key, on the device
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "xidpipe"
LABEL_INCIDENT = "xidpipe.io/incident"  # the incident id in label form (`incident_label`)
ANN_INCIDENT = "xidpipe.io/incident"
ANN_GPU = "xidpipe.io/gpu-uuid"
ANN_NODE = "xidpipe.io/node"
ANN_EFFECT = "xidpipe.io/effect"  # the effect xidpipe wrote: another one means an operator changed it
ANN_DEVICE = "xidpipe.io/device"  # driver/pool/device as xidpipe wrote them
ANN_QUARANTINED_AT = "xidpipe.io/quarantined-at"
ANN_REASON = "xidpipe.io/quarantine-reason"
ANNOTATION_MAX = 1024
NAME_MAX = 253
LABEL_VALUE_MAX = 63
# The lifecycle states after which a quarantine is no longer wanted: people repaired the card,
# returned it from RMA, or closed the incident. `rma` keeps it: the card is away, and a rule on a
# device that is gone harms nothing.
RELEASED_BY_LIFECYCLE = frozenset({"repaired", "returned", "closed"})

Effect = Literal["NoSchedule", "NoExecute", "None"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeviceRef(_Frozen):
    """One device of a ResourceSlice, as a DeviceTaintRule selects it."""

    driver: str
    pool: str
    device: str

    @property
    def text(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class RuleView(_Frozen):
    """xidpipe's DeviceTaintRule of one GPU as it stands in the cluster."""

    name: str
    device: DeviceRef | None  # the selector as it stands (None: not one whole device any more)
    effect: str
    value: str = ""
    incident_id: str = ""
    gpu_uuid: str = ""
    node: str = ""
    written_effect: str = ""
    written_device: str = ""
    quarantined_at: str = ""
    resource_version: str | None = None
    generation: int | None = None  # metadata.generation: moves with the spec only, not with the status
    eviction: str | None = None  # the EvictionInProgress condition: "True: <message>", ...

    @property
    def changed(self) -> str | None:
        """What someone else changed in xidpipe's rule, or None when it says what xidpipe wrote."""
        if self.effect != self.written_effect:
            return f"its effect is {self.effect}, xidpipe wrote {self.written_effect or 'nothing'}"
        device = self.device.text if self.device is not None else "no single device"
        if device != self.written_device:
            return f"it selects {device}, xidpipe wrote {self.written_device or 'nothing'}"
        return None

    @property
    def effective(self) -> bool:
        """It keeps work off the GPU (a `None` effect, xidpipe's dry run, does not)."""
        return self.effect in ("NoSchedule", "NoExecute")


class GpuView(_Frozen):
    """The incident's GPU as the responder's DRA caches know it, read just before deciding."""

    uuid: str = ""
    device: DeviceRef | None = None
    unresolved: str = Field(default="no DRA device lookup", description="why `device` is None")
    rule: RuleView | None = None  # the GPU's rule (`rule_name`), when one exists
    node_gpus: int = 0  # GPU devices of the node's slices
    node_quarantined: int = 0  # of them, the GPUs xidpipe holds quarantined (effective rules), this one included


class NodeQuarantine(_Frozen):
    """A node's GPUs and xidpipe's rules on them: what the node's condition says."""

    node: str
    gpus: int = 0
    rules: tuple[RuleView, ...] = ()

    @property
    def effective(self) -> tuple[RuleView, ...]:
        return tuple(r for r in self.rules if r.effective)


# --- names --------------------------------------------------------------------------------------

_NAME_OK = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_OK = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def rule_name(gpu_uuid: str) -> str:
    """The GPU's one rule: `xidpipe-gpu-<uuid without GPU->`, lower case; a UUID that does not make a
    DNS name is hashed."""
    tail = gpu_uuid.strip().lower().removeprefix("gpu-")
    if not tail or not _NAME_OK.match(tail) or len(RULE_PREFIX) + len(tail) > NAME_MAX:
        tail = "h" + hashlib.sha256(gpu_uuid.encode()).hexdigest()[:40]
    return RULE_PREFIX + tail


def incident_label(incident_id: str) -> str:
    """The incident id as a label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends):
    `v2:<hex>@<time>` becomes `v2-<hex>_<time>`; one that does not fit is hashed."""
    value = incident_id.replace(":", "-").replace("@", "_")
    if len(value) <= LABEL_VALUE_MAX and _LABEL_OK.match(value):
        return value
    return "h" + hashlib.sha256(incident_id.encode()).hexdigest()[:40]


def rule_labels(incident_id: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INCIDENT: incident_label(incident_id)}


def rule_annotations(*, incident_id: str, gpu_uuid: str, node: str, device: DeviceRef, effect: str, reason: str,
                     at: datetime) -> dict[str, str]:
    return {ANN_INCIDENT: incident_id, ANN_GPU: gpu_uuid, ANN_NODE: node, ANN_EFFECT: effect,
            ANN_DEVICE: device.text, ANN_QUARANTINED_AT: at.isoformat(), ANN_REASON: reason[:ANNOTATION_MAX]}


# --- resolution ---------------------------------------------------------------------------------


def unresolved_reason(node: str, gpu: str, driver: str, *, node_has_slices: bool) -> str:
    """Why the GPU is not a DRA device xidpipe can quarantine (the fallback's reason)."""
    if not gpu:
        return "the incident names no GPU"
    if not gpu.upper().startswith("GPU-"):
        return f"the incident's GPU is known only by its PCI address {gpu}, not its UUID"
    if not node_has_slices:
        return (f"node {node} publishes no ResourceSlice of driver {driver} (its GPUs are not DRA devices: the "
                "classic device plugin)")
    return f"no ResourceSlice device of driver {driver} on node {node} has the UUID {gpu}"


# --- the node's condition -----------------------------------------------------------------------


def quarantine_condition(q: NodeQuarantine) -> tuple[str, str, str]:
    """The node's `GPUHealthy` condition (status, reason, message) for xidpipe's quarantines on it."""
    rules = sorted(q.effective, key=lambda r: r.device.device if r.device else r.name)
    if not rules:
        return "True", "GPUsReleased", "no GPU of this node is quarantined by xidpipe"
    of = f" of {q.gpus}" if q.gpus else ""
    listed = "; ".join(f"{r.device.device if r.device else '?'} ({r.gpu_uuid}): rule {r.name}, {r.effect}, "
                       f"incident {r.incident_id}" for r in rules)
    text = f"{len(rules)}{of} GPUs quarantined by xidpipe: {listed}"
    return "False", "GPUQuarantined", text[:ANNOTATION_MAX]


# --- release and reconciliation ------------------------------------------------------------------


class QuarantineRelease(_Frozen):
    outcome: ReleaseOutcome
    reason: str


def decide_quarantine_release(rule: RuleView | None, gpu: str, incident_id: str | None) -> QuarantineRelease:
    """Delete xidpipe's rule of a GPU: only xidpipe's, only as xidpipe wrote it, and only for the named
    incident when one is given."""
    o = ReleaseOutcome
    if rule is None:
        return QuarantineRelease(outcome=o.REFUSE, reason=f"GPU {gpu} carries no quarantine by xidpipe")
    changed = rule.changed
    if changed is not None:
        return QuarantineRelease(outcome=o.REFUSE, reason=(
            f"rule {rule.name} was changed by someone else ({changed}): xidpipe leaves it alone; delete it with "
            "kubectl if that is intended"))
    if incident_id is not None and incident_id != rule.incident_id:
        return QuarantineRelease(outcome=o.REFUSE, reason=(
            f"GPU {gpu} is quarantined by xidpipe for incident {rule.incident_id}, not {incident_id}"))
    return QuarantineRelease(outcome=o.RELEASE, reason=(
        f"delete xidpipe's rule {rule.name} of GPU {gpu} for incident {rule.incident_id}"))


ReconcileAction = Literal["keep", "remove", "report"]


class ReconcileDecision(_Frozen):
    action: ReconcileAction
    reason: str


def reconcile_rule(rule: RuleView, lifecycle: str | None) -> ReconcileDecision:
    """What to do with one of xidpipe's rules found in the cluster, given its incident's lifecycle
    state (None: the history has no such incident)."""
    changed = rule.changed
    if changed is not None:
        return ReconcileDecision(action="report", reason=(
            f"rule {rule.name} was changed by someone else ({changed}): left alone"))
    if lifecycle is None:
        return ReconcileDecision(action="report", reason=(
            f"rule {rule.name} names incident {rule.incident_id or '?'}, which the history does not hold: left alone"))
    if lifecycle in RELEASED_BY_LIFECYCLE:
        return ReconcileDecision(action="remove", reason=(
            f"incident {rule.incident_id} is {lifecycle}: its quarantine of GPU {rule.gpu_uuid} is no longer wanted"))
    return ReconcileDecision(action="keep", reason=f"incident {rule.incident_id} is {lifecycle}")
