"""A pod's workload: what it belongs to, from its owners and the labels its controllers write.

`workload_of(pod, chain)` is the one decision: from a pod's namespace, name, labels, annotations and
owner references (`PodFacts`, read from the API server's JSON by `pod_facts`), plus the owners above
its controller that the node agent resolved (`chain`, nearest first: the CronJob of a Job), it
returns the workload (`WorkloadRef`: kind, API group, namespace, name) and how that was decided.

Precedence: the top-level owner. A JobSet is its Jobs' workload, a CronJob its Job's, a training
job its pods'. Where a controller documents a label that names its top-level object on every pod,
the label decides (`LABEL_RULES`, outermost first: a TrainJob's JobSet pods are the TrainJob's),
unless the agent read an owner above the object the label names (a RayJob above the RayCluster its
pods name); otherwise the owner references do (the controller's, then the chain above it); a pod
without owners is its own workload. Each rule names the source that documents its label or shape
(`LABEL_RULES`, `_from_owners`); docs/streams.md ("Workloads") has them as a table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

How = Literal["label", "owner", "owner_chain", "pod"]
MAX_KEY = 253  # an incident's component id (`history.tables.Incident.component_id`)

# Kinds that Kubernetes itself defines: a kind of another API group with the same name (Volcano's
# `Job`) is written with its group in a workload's key, so that the two never share one.
BUILTIN_GROUPS: Mapping[str, str] = {
    "Pod": "", "Job": "batch", "CronJob": "batch", "Deployment": "apps", "ReplicaSet": "apps",
    "StatefulSet": "apps", "DaemonSet": "apps", "ReplicationController": "",
}


class OwnerRef(BaseModel):
    """One owner reference as the API server returns it (`metadata.ownerReferences[]`)."""

    model_config = ConfigDict(frozen=True)

    kind: str
    name: str
    api_version: str = ""  # e.g. "batch/v1", "jobset.x-k8s.io/v1alpha2", "v1"
    uid: str | None = None
    controller: bool = False

    @property
    def group(self) -> str:
        """The API group ("" for the core group's `v1`)."""
        return self.api_version.rpartition("/")[0]


class PodFacts(BaseModel):
    """What `workload_of` reads of a pod: only the labels and annotations some rule reads are kept."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    uid: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owners: tuple[OwnerRef, ...] = ()


class WorkloadRef(BaseModel):
    """A pod's workload and how it was decided (`basis`: the label or the owners that said so)."""

    model_config = ConfigDict(frozen=True)

    kind: str
    group: str = ""
    namespace: str
    name: str
    how: How
    basis: str

    @property
    def key(self) -> str:
        """`<namespace>/<Kind>/<name>`, the kind qualified by its group when it shares a built-in kind's
        name (`team/Job.batch.volcano.sh/train`): the workload's identity in incidents. A key longer than
        an incident's component id may be (`MAX_KEY`) keeps its start and a hash of the whole."""
        builtin = BUILTIN_GROUPS.get(self.kind)
        kind = self.kind if builtin in (None, self.group) or not self.group else f"{self.kind}.{self.group}"
        key = f"{self.namespace}/{kind}/{self.name}"
        if len(key) <= MAX_KEY:
            return key
        return f"{key[:MAX_KEY - 17]}~{hashlib.sha256(key.encode()).hexdigest()[:16]}"


# --- labels ----------------------------------------------------------------------------------

TRAINING_OPERATORS: Mapping[str, str] = {  # `training.kubeflow.org/operator-name` → kind
    "pytorchjob-controller": "PyTorchJob",
    "tfjob-controller": "TFJob",
    "mpijob-controller": "MPIJob",
    "mpi-operator": "MPIJob",  # kubeflow/mpi-operator v2beta1 (`OperatorName`)
    "xgboostjob-controller": "XGBoostJob",
    "paddlejob-controller": "PaddleJob",
    "jaxjob-controller": "JAXJob",
    "mxjob-controller": "MXJob",
}
RAY_ROOT_KINDS = frozenset({"RayJob", "RayService"})


def _ray_root_kind(pod: PodFacts) -> str | None:
    crd = pod.labels.get("ray.io/originated-from-crd", "")
    return crd if crd in RAY_ROOT_KINDS else None


def _training_kind(pod: PodFacts) -> str | None:
    operator = TRAINING_OPERATORS.get(pod.labels.get("training.kubeflow.org/operator-name", ""))
    return operator or next((o.kind for o in pod.owners if o.group == "kubeflow.org"), None)


@dataclass(frozen=True, slots=True)
class LabelRule:
    """A label (or annotation) a controller writes on every pod of its workload, naming it; its kind is
    `kind`, or what `kind_from` reads of the pod (None: the rule does not apply)."""

    key: str
    kind: str
    group: str
    annotation_too: bool = False
    kind_from: Callable[[PodFacts], str | None] | None = None

    def name_in(self, pod: PodFacts) -> str | None:
        value = pod.labels.get(self.key) or (pod.annotations.get(self.key) if self.annotation_too else None)
        return value or None

    def kind_of(self, pod: PodFacts) -> str | None:
        return self.kind_from(pod) if self.kind_from is not None else self.kind


# Outermost first: a workload that creates another is checked before it.
LABEL_RULES: tuple[LabelRule, ...] = (
    # Kubeflow Trainer v2: kubeflow/trainer pkg/constants `LabelTrainJobName`, on its JobSet's pod template.
    LabelRule("trainer.kubeflow.org/trainjob-name", "TrainJob", "trainer.kubeflow.org"),
    # KubeRay ray-operator/controllers/ray/utils/constant.go: RayJob or RayService, with
    # `ray.io/originated-from-crd`; rayjob_controller.go writes both on the submitter Job's pods.
    LabelRule("ray.io/originated-from-cr-name", "", "ray.io", kind_from=_ray_root_kind),
    # Kubeflow training jobs: kubeflow/common pkg/apis/common/v1/constants.go (`JobNameLabel`,
    # `OperatorNameLabel`), training-operator's `GenLabels`, mpi-operator's `defaultLabels` (its workers
    # and its launcher Job's pods); the kind from the operator's name or the kubeflow.org owner.
    LabelRule("training.kubeflow.org/job-name", "", "kubeflow.org", kind_from=_training_kind),
    # KubeRay common/pod.go `labelPod`: a cluster's pods name their RayCluster only (a RayJob's or
    # RayService's is its owner, read by the agent).
    LabelRule("ray.io/cluster", "RayCluster", "ray.io"),
    # kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go `JobSetNameKey`, on its Jobs' pods.
    LabelRule("jobset.sigs.k8s.io/jobset-name", "JobSet", "jobset.x-k8s.io"),
    # kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go `SetNameLabelKey`: leaders
    # (pods of the set's StatefulSet) and workers (of a StatefulSet their leader pod owns).
    LabelRule("leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet", "leaderworkerset.x-k8s.io"),
    # volcano-sh/apis pkg/apis/batch/v1alpha1/labels.go `JobNameKey` ("used in pod annotation /
    # labels"; volcano's createJobPod writes both).
    LabelRule("volcano.sh/job-name", "Job", "batch.volcano.sh", annotation_too=True),
    # kubernetes-sigs/kueue pkg/controller/jobs/pod/constants `GroupNameLabel`: plain pods admitted as
    # a group, whose Workload is named for the group (pod_controller.go `workloadName`).
    LabelRule("kueue.x-k8s.io/pod-group-name", "Workload", "kueue.x-k8s.io"),
)
POD_TEMPLATE_HASH = "pod-template-hash"
JOB_NAME = "batch.kubernetes.io/job-name"
_ALSO_READ = ("ray.io/originated-from-crd", "training.kubeflow.org/operator-name", POD_TEMPLATE_HASH, JOB_NAME)
READ_LABELS = frozenset({r.key for r in LABEL_RULES} | set(_ALSO_READ))
READ_ANNOTATIONS = frozenset(r.key for r in LABEL_RULES if r.annotation_too)


# --- the decision ----------------------------------------------------------------------------


def controller_of(pod: PodFacts) -> OwnerRef | None:
    """The owner that controls the pod: the reference marked `controller`, else the first; a Node (the
    owner of a static pod's mirror) is no workload."""
    owners = [o for o in pod.owners if not (o.kind == "Node" and o.group == "")]
    return next((o for o in owners if o.controller), owners[0] if owners else None)


def workload_of(pod: PodFacts, chain: Sequence[OwnerRef] = ()) -> WorkloadRef:
    """The pod's workload. `chain`: the owners above its controller, nearest first, as far as the
    agent could read them (a Job's CronJob)."""
    owner = controller_of(pod)
    owners = [owner, *chain] if owner is not None else []
    for rule in LABEL_RULES:
        name, kind = rule.name_in(pod), rule.kind_of(pod)
        if name and kind:
            at = next((i for i, o in enumerate(owners) if (o.kind, o.group, o.name) == (kind, rule.group, name)), None)
            if at is not None and at < len(owners) - 1:  # the agent read an owner above it (a RayJob's cluster)
                return _from_owners(pod, owners, f"label {rule.key}={name}, then ")
            return WorkloadRef(kind=kind, group=rule.group, namespace=pod.namespace, name=name, how="label",
                               basis=f"label {rule.key}={name}")
    if owners:
        return _from_owners(pod, owners)
    job = pod.labels.get(JOB_NAME)
    if job:
        return WorkloadRef(kind="Job", group="batch", namespace=pod.namespace, name=job, how="label",
                           basis=f"label {JOB_NAME}={job} (no owner reference)")
    return WorkloadRef(kind="Pod", namespace=pod.namespace, name=pod.name, how="pod",
                       basis="no owner reference and no workload label: the pod itself")


def _from_owners(pod: PodFacts, owners: list[OwnerRef], before: str = "") -> WorkloadRef:
    """The top of the owner chain: a CronJob above its Job (its controller reference), any controller
    above its pods. A ReplicaSet named `<deployment>-<pod-template-hash>` is its Deployment's (the
    Kubernetes Deployment docs: "The ReplicaSet name is [DEPLOYMENT-NAME]-[HASH]", the hash being its
    pods' `pod-template-hash` label)."""
    path = before + "owner " + " → ".join(f"{o.kind} {o.name}" for o in owners)
    top = owners[-1]
    how: How = "owner" if len(owners) == 1 else "owner_chain"
    template_hash = pod.labels.get(POD_TEMPLATE_HASH)
    if top.kind == "ReplicaSet" and top.group == "apps" and template_hash and top.name.endswith(f"-{template_hash}"):
        deployment = top.name[: -len(template_hash) - 1]
        return WorkloadRef(kind="Deployment", group="apps", namespace=pod.namespace, name=deployment, how=how,
                           basis=f"{path}, named <deployment>-<{POD_TEMPLATE_HASH} {template_hash}>")
    return WorkloadRef(kind=top.kind, group=top.group, namespace=pod.namespace, name=top.name, how=how,
                       basis=path)


# --- the API server's JSON -------------------------------------------------------------------


def owner_refs(meta: Mapping[str, Any]) -> tuple[OwnerRef, ...]:
    """The owner references of an object's `metadata` (as the API server writes them, camelCase)."""
    out = []
    for o in meta.get("ownerReferences") or ():
        if isinstance(o, Mapping) and isinstance(o.get("kind"), str) and isinstance(o.get("name"), str):
            out.append(OwnerRef(kind=o["kind"], name=o["name"], api_version=str(o.get("apiVersion") or ""),
                                uid=o.get("uid") if isinstance(o.get("uid"), str) else None,
                                controller=o.get("controller") is True))
    return tuple(out)


def pod_facts(obj: Mapping[str, Any]) -> PodFacts:
    """A pod object as the API server returns it (JSON) → what `workload_of` reads of it."""
    meta = obj.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return PodFacts(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
        uid=meta.get("uid") if isinstance(meta.get("uid"), str) else None,
        labels={k: v for k, v in labels.items() if k in READ_LABELS and isinstance(v, str)},
        annotations={k: v for k, v in annotations.items() if k in READ_ANNOTATIONS and isinstance(v, str)},
        owners=owner_refs(meta),
    )


def holds_gpu(obj: Mapping[str, Any], prefixes: Sequence[str]) -> bool:
    """Whether a pod (API JSON) asks for a GPU: a container's limit or request of a resource named with
    one of `prefixes` (the device plugin's, as PodResources reports them), or a DRA resource claim."""
    spec = obj.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        if not isinstance(container, Mapping):
            continue
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            if any(str(name).startswith(tuple(prefixes)) for name in resources.get(part) or {}):
                return True
    return False
