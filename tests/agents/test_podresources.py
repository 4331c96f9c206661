import threading
from pathlib import Path

import grpc
import pytest

from agents.metrics import Metrics
from agents.signals import SYSTEM_CLOCK, SensorContext
from agents.signals.podresources.mapping import split_device_id
from agents.signals.podresources.watcher import PodResourcesClient, PodResourcesSettings, PodResourcesWatcher
from models.node_records import NodeRecord, PodAssignments
from tests.fakes.kubelet.server import FakeContainer, FakeKubelet, FakePod
from tests.polling import poll

GPU0 = "GPU-0b6d3bf1-6a53-4b34-9e1f-6b1a7f5a0c01"
GPU1 = "GPU-1c7e4c02-7b64-4c45-af20-7c2b806b1d12"
MIG = "MIG-5f4a1d3e-2b1c-5d6e-8f70-1a2b3c4d5e6f"


@pytest.fixture
def kubelet(tmp_path: Path):  # type: ignore[no-untyped-def]
    with FakeKubelet(tmp_path / "kubelet.sock") as k:
        k.allocatable = {"nvidia.com/gpu": [GPU0, GPU1], "nvidia.com/mig-1g.10gb": [MIG], "cpu": ["0"]}
        k.set_pods([
            FakePod("trainer-0", "ml", [FakeContainer("main", {"nvidia.com/gpu": [GPU0]}),
                                        FakeContainer("sidecar", {"example.com/nic": ["nic0"]})]),
            FakePod("notebook", "research", [FakeContainer("jupyter", {"nvidia.com/mig-1g.10gb": [MIG]})]),
            FakePod("infer-a", "serve", [FakeContainer("srv", {"nvidia.com/gpu": [f"{GPU1}::0"]})]),
            FakePod("infer-b", "serve", [FakeContainer("srv", {"nvidia.com/gpu": [f"{GPU1}::1"]})]),
        ])
        yield k


def _watcher(path: Path, sink: list[NodeRecord], **kw: float) -> PodResourcesWatcher:
    settings = PodResourcesSettings(socket_path=path, timeout_s=2, **kw)
    return PodResourcesWatcher(SensorContext(sensor="podresources", node="gpu-node-1", settings=settings,
                                             publish=sink.append, clock=SYSTEM_CLOCK, metrics=Metrics()))


@pytest.mark.parametrize(("raw", "base", "replica"), [
    (GPU0, GPU0, None), (f"{GPU0}::3", GPU0, 3), (MIG, MIG, None), ("weird::x", "weird::x", None),
])
def test_split_device_id(raw: str, base: str, replica: int | None) -> None:
    assert split_device_id(raw) == (base, replica)


def test_whole_mig_and_time_sliced_devices_map_to_containers(kubelet: FakeKubelet) -> None:
    record = _watcher(kubelet.socket_path, []).poll_once()
    assert isinstance(record, PodAssignments)
    by_id = {a.device_id: a for a in record.assignments}
    assert set(by_id) == {GPU0, MIG, f"{GPU1}::0", f"{GPU1}::1"}  # the NIC is not a GPU resource
    assert (by_id[GPU0].pod, by_id[GPU0].namespace, by_id[GPU0].container) == ("trainer-0", "ml", "main")
    assert by_id[MIG].mig and by_id[MIG].resource_name == "nvidia.com/mig-1g.10gb"
    assert by_id[f"{GPU1}::1"].gpu_id == GPU1 and by_id[f"{GPU1}::1"].replica == 1
    assert by_id[f"{GPU1}::1"].pod == "infer-b"
    assert record.allocatable == tuple(sorted([GPU0, GPU1, MIG]))


def test_only_changes_are_published(kubelet: FakeKubelet) -> None:
    w = _watcher(kubelet.socket_path, [])
    first = w.poll_once()
    assert first is not None and w.poll_once() is None
    kubelet.set_pods([FakePod("trainer-1", "ml", [FakeContainer("main", {"nvidia.com/gpu": [GPU0]})])])
    changed = w.poll_once()
    assert changed is not None and [a.pod for a in changed.assignments] == ["trainer-1"]
    assert changed.changed_at >= first.changed_at


def test_get_for_unknown_pod_is_not_found(kubelet: FakeKubelet) -> None:
    from agents.signals.podresources import api_pb2, api_pb2_grpc

    with grpc.insecure_channel(f"unix://{kubelet.socket_path}") as ch:
        stub = api_pb2_grpc.PodResourcesListerStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            stub.Get(api_pb2.GetPodResourcesRequest(pod_name="nope", pod_namespace="x"), timeout=2)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_watcher_thread_publishes_and_survives_kubelet_errors(kubelet: FakeKubelet) -> None:
    sink: list[NodeRecord] = []
    w = _watcher(kubelet.socket_path, sink, interval_s=0.05)
    kubelet.fail_with = grpc.StatusCode.RESOURCE_EXHAUSTED  # the kubelet's rate limit
    stop = threading.Event()
    w.start(stop)
    try:
        poll("two failed calls", lambda: w._metrics.get("xidpipe_agent_podresources_errors_total") >= 2, 10,
             interval=0.02)
        assert not sink
        kubelet.fail_with = None
        poll("the assignments", lambda: sink, 10, interval=0.02)
        assert len(sink[0].assignments) == 4  # type: ignore[union-attr]
    finally:
        w.close()


def test_client_reports_unreachable_socket(tmp_path: Path) -> None:
    client = PodResourcesClient(tmp_path / "absent.sock", timeout_s=0.5)
    with pytest.raises(grpc.RpcError) as err:
        client.list()
    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    client.close()
