"""`models.workloads.workload_of`, table-tested with pods as each controller writes them (their
metadata as the API server returns it: the labels, annotations and owner references each
controller's source sets; see the table in `models/workloads.py` for where each comes from)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from models.correlate import workload_name
from models.workloads import MAX_KEY, OwnerRef, PodFacts, WorkloadRef, holds_gpu, pod_facts, workload_of

# A batch/v1 Job's pod (kubernetes/pkg/controller/job: the controller-uid and job-name labels, both
# spellings, and the Job as controller). `{index}` lines are an Indexed Job's.
JOB_POD = """
metadata:
  name: {pod}
  namespace: {ns}
  uid: 7f0c5a9e-0d1c-4f7e-9d8e-0c9d8e7f6a5b
  labels:
    batch.kubernetes.io/controller-uid: 3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d
    batch.kubernetes.io/job-name: {job}
    controller-uid: 3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d
    job-name: {job}
  ownerReferences:
  - apiVersion: batch/v1
    kind: Job
    name: {job}
    uid: 3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d
    controller: true
    blockOwnerDeletion: true
"""

POD = {
    "job": JOB_POD.format(pod="pi-x7k2p", ns="team-a", job="pi"),
    "indexed_job": """
metadata:
  name: job-3-x7k2p
  namespace: team-a
  labels:
    batch.kubernetes.io/controller-uid: 9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d
    batch.kubernetes.io/job-completion-index: "3"
    batch.kubernetes.io/job-name: job
    controller-uid: 9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d
    job-name: job
  annotations:
    batch.kubernetes.io/job-completion-index: "3"
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: job, uid: 9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d, controller: true,
     blockOwnerDeletion: true}
""",
    # A CronJob's Job is named <cronjob>-<scheduled minute>; its pods name only the Job.
    "cronjob": JOB_POD.format(pod="nightly-29087640-abcde", ns="team-a", job="nightly-29087640"),
    # kubernetes-sigs/jobset: the JobSet's labels on its Jobs' pods, the Job as controller.
    "jobset": """
metadata:
  name: trainer-workers-0-23-k9d2x
  namespace: team-llm
  labels:
    batch.kubernetes.io/job-completion-index: "23"
    batch.kubernetes.io/job-name: trainer-workers-0
    job-name: trainer-workers-0
    jobset.sigs.k8s.io/global-replicas: "1"
    jobset.sigs.k8s.io/job-global-index: "0"
    jobset.sigs.k8s.io/job-index: "0"
    jobset.sigs.k8s.io/job-key: 6d5a3b2f0c1e4d7a9b8c6e5f4a3b2c1d0e9f8a7b
    jobset.sigs.k8s.io/jobset-name: trainer
    jobset.sigs.k8s.io/jobset-uid: 0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d
    jobset.sigs.k8s.io/replicatedjob-name: workers
    jobset.sigs.k8s.io/replicatedjob-replicas: "1"
  annotations:
    jobset.sigs.k8s.io/jobset-name: trainer
    batch.kubernetes.io/job-completion-index: "23"
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: trainer-workers-0, uid: 1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f,
     controller: true, blockOwnerDeletion: true}
""",
    "deployment": """
metadata:
  name: inference-7d4b9c8f6d-k2x9p
  namespace: team-serving
  labels: {app: inference, pod-template-hash: 7d4b9c8f6d}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: inference-7d4b9c8f6d, uid: 5e4d3c2b-1a0f-4e9d-8c7b-6a5f4e3d2c1b,
     controller: true, blockOwnerDeletion: true}
""",
    "replicaset": """
metadata:
  name: legacy-rs-x7k2p
  namespace: team-serving
  labels: {app: legacy}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: legacy-rs, uid: 1a2b3c4d-0000-4000-8000-000000000001,
     controller: true, blockOwnerDeletion: true}
""",
    "statefulset": """
metadata:
  name: embeddings-2
  namespace: team-serving
  labels:
    apps.kubernetes.io/pod-index: "2"
    controller-revision-hash: embeddings-6b8f7d9c4
    statefulset.kubernetes.io/pod-name: embeddings-2
  ownerReferences:
  - {apiVersion: apps/v1, kind: StatefulSet, name: embeddings, uid: 2b3c4d5e-0000-4000-8000-000000000002,
     controller: true, blockOwnerDeletion: true}
""",
    "daemonset": """
metadata:
  name: dcgm-exporter-x7k2p
  namespace: gpu-operator
  labels: {app: dcgm-exporter, controller-revision-hash: 5d7f8b6c9, pod-template-generation: "1"}
  ownerReferences:
  - {apiVersion: apps/v1, kind: DaemonSet, name: dcgm-exporter, uid: 3c4d5e6f-0000-4000-8000-000000000003,
     controller: true, blockOwnerDeletion: true}
""",
    # kubernetes-sigs/lws: the leader is a pod of the LeaderWorkerSet's StatefulSet, a worker one of
    # the StatefulSet its leader pod owns; both carry the set's name.
    "lws_leader": """
metadata:
  name: vllm-0
  namespace: team-serving
  labels:
    leaderworkerset.sigs.k8s.io/name: vllm
    leaderworkerset.sigs.k8s.io/group-index: "0"
    leaderworkerset.sigs.k8s.io/worker-index: "0"
    leaderworkerset.sigs.k8s.io/group-key: 4b1f0e8d2c9a
  annotations: {leaderworkerset.sigs.k8s.io/size: "4"}
  ownerReferences:
  - {apiVersion: apps/v1, kind: StatefulSet, name: vllm, uid: 4d5e6f7a-0000-4000-8000-000000000004,
     controller: true, blockOwnerDeletion: true}
""",
    "lws_worker": """
metadata:
  name: vllm-0-3
  namespace: team-serving
  labels:
    leaderworkerset.sigs.k8s.io/name: vllm
    leaderworkerset.sigs.k8s.io/group-index: "0"
    leaderworkerset.sigs.k8s.io/worker-index: "3"
    leaderworkerset.sigs.k8s.io/group-key: 4b1f0e8d2c9a
  annotations: {leaderworkerset.sigs.k8s.io/leader-name: vllm-0, leaderworkerset.sigs.k8s.io/size: "4"}
  ownerReferences:
  - {apiVersion: apps/v1, kind: StatefulSet, name: vllm-0, uid: 5e6f7a8b-0000-4000-8000-000000000005,
     controller: true, blockOwnerDeletion: true}
""",
    # kubeflow/training-operator: GenLabels (job-name, operator-name) and the replica labels; the
    # PyTorchJob as controller.
    "pytorchjob": """
metadata:
  name: resnet-worker-3
  namespace: team-vision
  labels:
    training.kubeflow.org/job-name: resnet
    training.kubeflow.org/operator-name: pytorchjob-controller
    training.kubeflow.org/replica-index: "3"
    training.kubeflow.org/replica-type: worker
  ownerReferences:
  - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: resnet, uid: 6f7a8b9c-0000-4000-8000-000000000006,
     controller: true, blockOwnerDeletion: true}
""",
    # The older operators (kubeflow/common v0.3: `group-name` and `job-name`) name no kind: the owner does.
    "pytorchjob_legacy": """
metadata:
  name: resnet-master-0
  namespace: team-vision
  labels: {group-name: kubeflow.org, job-name: resnet, pytorch-job-name: resnet, pytorch-replica-type: master,
           pytorch-replica-index: "0", controller-name: pytorch-operator}
  ownerReferences:
  - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: resnet, uid: 6f7a8b9c-0000-4000-8000-000000000006,
     controller: true, blockOwnerDeletion: true}
""",
    "tfjob": """
metadata:
  name: mnist-ps-0
  namespace: team-vision
  labels:
    training.kubeflow.org/job-name: mnist
    training.kubeflow.org/operator-name: tfjob-controller
    training.kubeflow.org/replica-index: "0"
    training.kubeflow.org/replica-type: ps
  ownerReferences:
  - {apiVersion: kubeflow.org/v1, kind: TFJob, name: mnist, uid: 7a8b9c0d-0000-4000-8000-000000000007,
     controller: true, blockOwnerDeletion: true}
""",
    # kubeflow/mpi-operator v2beta1: workers are the MPIJob's pods; the launcher is a batch Job the
    # MPIJob owns, whose pods carry the same defaultLabels.
    "mpijob_worker": """
metadata:
  name: bert-worker-1
  namespace: team-nlp
  labels:
    training.kubeflow.org/job-name: bert
    training.kubeflow.org/job-role: worker
    training.kubeflow.org/operator-name: mpi-operator
    training.kubeflow.org/replica-index: "1"
  ownerReferences:
  - {apiVersion: kubeflow.org/v2beta1, kind: MPIJob, name: bert, uid: 8b9c0d1e-0000-4000-8000-000000000008,
     controller: true, blockOwnerDeletion: true}
""",
    "mpijob_launcher": """
metadata:
  name: bert-launcher-x7k2p
  namespace: team-nlp
  labels:
    batch.kubernetes.io/job-name: bert-launcher
    job-name: bert-launcher
    training.kubeflow.org/job-name: bert
    training.kubeflow.org/job-role: launcher
    training.kubeflow.org/operator-name: mpi-operator
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: bert-launcher, uid: 9c0d1e2f-0000-4000-8000-000000000009,
     controller: true, blockOwnerDeletion: true}
""",
    # kubeflow/trainer v2: a TrainJob runs as a JobSet whose pods carry the TrainJob's name too.
    "trainjob": """
metadata:
  name: ddp-node-0-1-abcde
  namespace: team-llm
  labels:
    batch.kubernetes.io/job-name: ddp-node-0
    jobset.sigs.k8s.io/jobset-name: ddp
    jobset.sigs.k8s.io/replicatedjob-name: node
    trainer.kubeflow.org/trainjob-ancestor-step: trainer
    trainer.kubeflow.org/trainjob-name: ddp
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: ddp-node-0, uid: 0d1e2f3a-0000-4000-8000-000000000010,
     controller: true, blockOwnerDeletion: true}
""",
    # ray-project/kuberay labelPod: the cluster's pods name their RayCluster only.
    "raycluster": """
metadata:
  name: raycluster-kuberay-gpu-group-worker-x7k2p
  namespace: team-rl
  labels:
    app.kubernetes.io/created-by: kuberay-operator
    app.kubernetes.io/name: kuberay
    ray.io/cluster: raycluster-kuberay
    ray.io/group: gpu-group
    ray.io/identifier: raycluster-kuberay-worker
    ray.io/is-ray-node: "yes"
    ray.io/node-type: worker
  ownerReferences:
  - {apiVersion: ray.io/v1, kind: RayCluster, name: raycluster-kuberay, uid: 1e2f3a4b-0000-4000-8000-000000000011,
     controller: true, blockOwnerDeletion: true}
""",
    # The submitter Job's pod of a RayJob (rayjob_controller.go: the originated-from labels).
    "rayjob_submitter": """
metadata:
  name: rayjob-sample-x7k2p
  namespace: team-rl
  labels:
    app.kubernetes.io/created-by: kuberay-operator
    batch.kubernetes.io/job-name: rayjob-sample
    ray.io/originated-from-cr-name: rayjob-sample
    ray.io/originated-from-crd: RayJob
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: rayjob-sample, uid: 2f3a4b5c-0000-4000-8000-000000000012,
     controller: true, blockOwnerDeletion: true}
""",
    # volcano-sh/volcano createJobPod: <job>-<task>-<index>, the job's name as label and annotation,
    # the Volcano Job (batch.volcano.sh) as controller.
    "volcano": """
metadata:
  name: train-worker-2
  namespace: team-hpc
  labels:
    volcano.sh/job-name: train
    volcano.sh/job-namespace: team-hpc
    volcano.sh/queue-name: default
    volcano.sh/task-index: "2"
    volcano.sh/task-spec: worker
  annotations:
    scheduling.k8s.io/group-name: train-3a4b5c6d-0000-4000-8000-000000000013
    volcano.sh/job-name: train
    volcano.sh/job-version: "0"
    volcano.sh/queue-name: default
    volcano.sh/task-index: "2"
    volcano.sh/task-spec: worker
    volcano.sh/template-uid: train-worker
  ownerReferences:
  - {apiVersion: batch.volcano.sh/v1alpha1, kind: Job, name: train, uid: 3a4b5c6d-0000-4000-8000-000000000013,
     controller: true, blockOwnerDeletion: true}
""",
    # kubernetes-sigs/kueue, plain pods: a group's pods carry its name; its Workload is named for it.
    "kueue_pod_group": """
metadata:
  name: sample-group-2
  namespace: team-a
  labels:
    kueue.x-k8s.io/managed: "true"
    kueue.x-k8s.io/pod-group-name: sample-group
    kueue.x-k8s.io/queue-name: user-queue
  annotations:
    kueue.x-k8s.io/pod-group-total-count: "3"
  finalizers: [kueue.x-k8s.io/managed]
""",
    "kueue_single_pod": """
metadata:
  name: notebook-gpu
  namespace: team-a
  labels: {kueue.x-k8s.io/managed: "true", kueue.x-k8s.io/queue-name: user-queue}
""",
    "plain": """
metadata:
  name: debug-shell
  namespace: team-a
  labels: {run: debug-shell}
""",
    # A static pod's mirror: the kubelet makes its Node the owner.
    "mirror": """
metadata:
  name: gpu-burn-node-7
  namespace: kube-system
  annotations: {kubernetes.io/config.mirror: 0f1e2d3c4b5a69788796a5b4c3d2e1f0}
  ownerReferences:
  - {apiVersion: v1, kind: Node, name: node-7, uid: 4b5c6d7e-0000-4000-8000-000000000014, controller: true}
""",
}

CRONJOB = OwnerRef(kind="CronJob", name="nightly", api_version="batch/v1", uid="c1", controller=True)
JOBSET = OwnerRef(kind="JobSet", name="trainer", api_version="jobset.x-k8s.io/v1alpha2", uid="j1", controller=True)
RAYJOB = OwnerRef(kind="RayJob", name="rayjob-sample", api_version="ray.io/v1", uid="r1", controller=True)

CASES: list[tuple[str, tuple[OwnerRef, ...], str, str, str]] = [
    # pod, the chain the agent read above its controller, the workload's key, how, what decided
    ("job", (), "team-a/Job/pi", "owner", "owner Job pi"),
    ("indexed_job", (), "team-a/Job/job", "owner", "owner Job job"),
    ("cronjob", (CRONJOB,), "team-a/CronJob/nightly", "owner_chain", "owner Job nightly-29087640 → CronJob nightly"),
    ("cronjob", (), "team-a/Job/nightly-29087640", "owner", "owner Job nightly-29087640"),  # its Job unread
    ("jobset", (), "team-llm/JobSet/trainer", "label", "label jobset.sigs.k8s.io/jobset-name=trainer"),
    ("jobset", (JOBSET,), "team-llm/JobSet/trainer", "label", "label jobset.sigs.k8s.io/jobset-name=trainer"),
    ("deployment", (), "team-serving/Deployment/inference", "owner", "pod-template-hash 7d4b9c8f6d"),
    ("replicaset", (), "team-serving/ReplicaSet/legacy-rs", "owner", "owner ReplicaSet legacy-rs"),
    ("statefulset", (), "team-serving/StatefulSet/embeddings", "owner", "owner StatefulSet embeddings"),
    ("daemonset", (), "gpu-operator/DaemonSet/dcgm-exporter", "owner", "owner DaemonSet dcgm-exporter"),
    ("lws_leader", (), "team-serving/LeaderWorkerSet/vllm", "label", "label leaderworkerset.sigs.k8s.io/name=vllm"),
    ("lws_worker", (), "team-serving/LeaderWorkerSet/vllm", "label", "label leaderworkerset.sigs.k8s.io/name=vllm"),
    ("pytorchjob", (), "team-vision/PyTorchJob/resnet", "label", "label training.kubeflow.org/job-name=resnet"),
    ("pytorchjob_legacy", (), "team-vision/PyTorchJob/resnet", "owner", "owner PyTorchJob resnet"),
    ("tfjob", (), "team-vision/TFJob/mnist", "label", "label training.kubeflow.org/job-name=mnist"),
    ("mpijob_worker", (), "team-nlp/MPIJob/bert", "label", "label training.kubeflow.org/job-name=bert"),
    ("mpijob_launcher", (), "team-nlp/MPIJob/bert", "label", "label training.kubeflow.org/job-name=bert"),
    ("trainjob", (JOBSET.model_copy(update={"name": "ddp"}),), "team-llm/TrainJob/ddp", "label",
     "label trainer.kubeflow.org/trainjob-name=ddp"),
    ("raycluster", (), "team-rl/RayCluster/raycluster-kuberay", "label", "label ray.io/cluster=raycluster-kuberay"),
    ("raycluster", (RAYJOB,), "team-rl/RayJob/rayjob-sample", "owner_chain",
     "label ray.io/cluster=raycluster-kuberay, then owner RayCluster raycluster-kuberay → RayJob rayjob-sample"),
    ("rayjob_submitter", (), "team-rl/RayJob/rayjob-sample", "label",
     "label ray.io/originated-from-cr-name=rayjob-sample"),
    ("volcano", (), "team-hpc/Job.batch.volcano.sh/train", "label", "label volcano.sh/job-name=train"),
    ("kueue_pod_group", (), "team-a/Workload/sample-group", "label",
     "label kueue.x-k8s.io/pod-group-name=sample-group"),
    ("kueue_single_pod", (), "team-a/Pod/notebook-gpu", "pod", "the pod itself"),
    ("plain", (), "team-a/Pod/debug-shell", "pod", "the pod itself"),
    ("mirror", (), "kube-system/Pod/gpu-burn-node-7", "pod", "the pod itself"),
]


def facts(name: str) -> PodFacts:
    obj: dict[str, Any] = yaml.safe_load(POD[name])
    return pod_facts(obj)


@pytest.mark.parametrize(("pod", "chain", "key", "how", "basis"), CASES, ids=[f"{c[0]}-{len(c[1])}" for c in CASES])
def test_workload_of_each_controllers_pods(pod: str, chain: tuple[OwnerRef, ...], key: str, how: str,
                                           basis: str) -> None:
    ref = workload_of(facts(pod), chain)
    assert ref.key == key and ref.how == how
    assert basis in ref.basis


def test_every_shape_of_the_table_is_tested() -> None:
    assert {c[0] for c in CASES} == set(POD)


def test_the_pods_of_one_workload_share_it_whatever_their_names() -> None:
    """Forty pods of one JobSet, of one Indexed Job, of one PyTorchJob: one workload each, whatever
    index or generated suffix their names end with (the name heuristics made forty of the first)."""
    keys, guessed = set(), set()
    for i in range(40):
        obj = yaml.safe_load(POD["jobset"])
        obj["metadata"]["name"] = name = f"trainer-workers-{i // 8}-{i % 8}-{i:05x}"
        obj["metadata"]["labels"]["batch.kubernetes.io/job-name"] = f"trainer-workers-{i // 8}"
        obj["metadata"]["ownerReferences"][0]["name"] = f"trainer-workers-{i // 8}"
        keys.add(workload_of(pod_facts(obj)).key)
        guessed.add(workload_name("team-llm", name, "trainer", None))
    assert keys == {"team-llm/JobSet/trainer"} and len(guessed) == 40


def test_kinds_of_other_groups_never_share_a_builtin_kinds_key() -> None:
    volcano = workload_of(facts("volcano"))
    batch = WorkloadRef(kind="Job", group="batch", namespace="team-hpc", name="train", how="owner", basis="")
    assert volcano.group == "batch.volcano.sh" and volcano.key != batch.key == "team-hpc/Job/train"


def test_a_training_label_without_a_kind_falls_back_to_the_owners() -> None:
    obj = yaml.safe_load(POD["pytorchjob"])
    obj["metadata"]["labels"]["training.kubeflow.org/operator-name"] = "some-future-controller"
    obj["metadata"]["ownerReferences"] = []
    assert workload_of(pod_facts(obj)).key == "team-vision/Pod/resnet-worker-3"


def test_an_orphaned_job_pod_keeps_its_job() -> None:
    obj = yaml.safe_load(POD["job"])
    obj["metadata"]["ownerReferences"] = []
    ref = workload_of(pod_facts(obj))
    assert (ref.key, ref.how) == ("team-a/Job/pi", "label")


def test_a_controller_reference_wins_over_other_owners() -> None:
    obj = yaml.safe_load(POD["statefulset"])
    obj["metadata"]["ownerReferences"].insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper",
                                                  "uid": "x"})
    assert workload_of(pod_facts(obj)).key == "team-serving/StatefulSet/embeddings"


def test_pod_facts_keep_only_what_the_rules_read() -> None:
    f = facts("volcano")
    assert set(f.labels) == {"volcano.sh/job-name"} and set(f.annotations) == {"volcano.sh/job-name"}
    assert f.owners[0].group == "batch.volcano.sh" and f.owners[0].controller is True


@pytest.mark.parametrize(("spec", "held"), [
    ({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}, True),
    ({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]}, True),
    ({"containers": [{"name": "c"}], "initContainers": [{"name": "i", "resources": {"limits":
                                                                                   {"nvidia.com/gpu": "1"}}}]}, True),
    ({"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu", "resourceClaimName": "a100"}]}, True),
    ({"containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}, False),
    ({"containers": ["not a container"]}, False),
    ({}, False),
])
def test_holds_gpu(spec: dict[str, Any], held: bool) -> None:
    assert holds_gpu({"spec": spec}, ("nvidia.com/gpu", "nvidia.com/mig-")) is held


def test_a_key_longer_than_an_incidents_component_id_stays_distinct_and_bounded() -> None:
    def ref(name: str) -> WorkloadRef:
        return WorkloadRef(kind="Deployment", group="apps", namespace="n" * 63, name=name, how="owner", basis="")

    short, long_a, long_b = ref("web"), ref("a" * 250 + "x"), ref("a" * 250 + "y")
    assert short.key == f"{'n' * 63}/Deployment/web"
    assert len(long_a.key) == len(long_b.key) == MAX_KEY and long_a.key != long_b.key
    assert long_a.key.startswith(f"{'n' * 63}/Deployment/aaa")
