"""`xidpipe replay DIR`: a recorded cluster through the stream's engine in one process, and what the
cordon policy, the ticket sink and the chat routing would have done with its incidents."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from models.cordon import pool_allowance
from models.cordon_policy import CordonPolicy, Drain
from models.node_records import DeviceAssignment, GpuInfo, GpuInventory, KernelLine, PodAssignments
from models.remediation_policy import RemediationPolicy
from tests import store_reads
from xidpipe.cli import main
from xidpipe.replay import ReplayInputError, run_replay
from xidpipe.replay.layout import open_cluster_dir
from xidpipe.replay.records import ClusterRecords

SAMPLES = Path(__file__).resolve().parents[1] / "xidpipe" / "samples" / "cluster"
COMPONENTS = {"gpu", "nvswitch", "node", "workload", "fleet"}
INCIDENT_KEYS = {"id", "component", "node", "gpu_uuid", "pci", "classification", "codes", "count", "first_seen",
                 "last_seen", "pods", "reason"}
LOST_UUID = "GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63"  # gpu-node-03's GPU that falls off the bus


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    """The sample cluster, declared part of a 100-node pool (so the breaker allows its cordons)."""
    root = tmp_path / "cluster"
    shutil.copytree(SAMPLES, root)
    (root / "replay.json").write_text(json.dumps({"format": "xidpipe-replay", "version": 1,
                                                  "pool_nodes": {"": 100}}))
    return root


def replay_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    code = main(["replay", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_sample_cluster_gives_attributed_classified_incidents(cluster: Path) -> None:
    result = run_replay(cluster)
    incidents = result.incidents
    assert incidents
    nodes_with_faults = {p.stem for p in SAMPLES.glob("*.log")}
    assert {i["node"] for i in incidents} == nodes_with_faults  # every sample node has a fault
    for i in incidents:
        assert set(i) >= INCIDENT_KEYS
        assert i["component"] in COMPONENTS
        assert i["count"] >= 1 and i["codes"]
        assert i["first_seen"] <= i["last_seen"]
    # the GPU that falls off the bus: hardware, on its UUID (from the identity lines), joined to its pod
    lost = [i for i in incidents if "Xid 79" in i["codes"]]
    assert lost and all(i["gpu_uuid"] == LOST_UUID and i["classification"] == "hardware" for i in lost)
    assert lost[0]["pods"] == ["team-llm/llm-pretrain-7-worker-3/trainer"]
    # Xid 13 on gpu-node-02 is attributed to the pods recorded in state.jsonl at its time
    app = [i for i in incidents if i["node"] == "gpu-node-02" and "Xid 13" in i["codes"]]
    assert app and all(set(i["pods"]) & {"team-nlp/bert-finetune-2/finetune", "team-serving/vllm-serve-5/vllm",
                                         "team-vision/trainer-9/trainer"} for i in app)
    # the default policy cordons the lost GPU's node at once; never for an application fault
    cordoned = {c["incident_id"]: c for c in result.to_dict()["cordons"]}  # type: ignore[union-attr]
    assert lost[0]["id"] in cordoned and cordoned[lost[0]["id"]]["rule"] == "gpu-lost"
    assert not any(i["id"] in cordoned for i in incidents if i["classification"] == "application")
    # tickets for hardware, none for application faults, whose owners get the message instead
    body = result.to_dict()
    ticketed = {t["incident_id"] for t in body["tickets"]}  # type: ignore[union-attr]
    assert lost[0]["id"] in ticketed
    assert not any(i["id"] in ticketed for i in incidents if i["classification"] == "application")
    channels = {m["incident_id"]: m["channel"] for m in body["messages"]}  # type: ignore[union-attr]
    assert channels[lost[0]["id"]] == "#gpu-infra"
    application = [i for i in incidents if i["classification"] == "application"]
    assert application and {channels[i["id"]] for i in application} == {"#gpu-alerts"}


def test_json_is_one_object_with_the_documented_fields(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, body = replay_json(capsys, str(cluster))
    assert code == 1
    assert {"incidents", "cordons", "tickets", "messages"} <= set(body)
    incidents = body["incidents"]
    assert isinstance(incidents, list) and incidents
    assert all(set(i) >= INCIDENT_KEYS for i in incidents)
    ids = {i["id"] for i in incidents}
    for key, fields in (("cordons", {"node", "incident_id", "rule", "gpu_uuid"}), ("tickets", {"incident_id",
                                                                                             "summary"}),
                        ("messages", {"incident_id", "channel"})):
        entries = body[key]
        assert isinstance(entries, list) and entries, key
        assert all(fields <= set(e) and e["incident_id"] in ids for e in entries), key
    stats = body["stats"]
    assert isinstance(stats, dict)
    assert stats["nodes"] == 5 and stats["lines_read"] == sum(
        len(p.read_bytes().splitlines()) for p in SAMPLES.glob("*.log"))


def test_the_text_summary_lists_incidents_cordons_tickets_and_messages(cluster: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(cluster)]) == 1
    out = capsys.readouterr().out
    assert "incidents:" in out and LOST_UUID in out
    assert "gpu-node-03: cordon" in out
    assert "Tickets:" in out and "Chat messages:" in out and "#gpu-infra" in out


def test_a_stricter_policy_changes_the_cordon_list(cluster: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _, default = replay_json(capsys, str(cluster))
    strict = tmp_path / "strict.yaml"
    strict.write_text("version: 1\nrules:\n  - name: gpu-lost-ten-times\n    match: {families: [gpu_lost]}\n"
                      "    action: cordon_after\n    occurrences: 10\n    window_s: 3600\n")
    _, stricter = replay_json(capsys, str(cluster), "--policy", str(strict))
    before = {c["node"] for c in default["cordons"]}  # type: ignore[union-attr]
    after = {c["node"] for c in stricter["cordons"]}  # type: ignore[union-attr]
    assert "gpu-node-03" in before and "gpu-node-03" not in after
    refused = [d for d in stricter["cordon_decisions"] if d["node"] == "gpu-node-03"  # type: ignore[union-attr]
               and d["rule"] == "gpu-lost-ten-times"]
    assert refused and {d["outcome"] for d in refused} == {"not_needed"}
    # the incidents do not depend on the cordon policy
    def seen(body: dict[str, object]) -> list[tuple[object, ...]]:
        return sorted((i["node"], i["component"], i["codes"], i["count"]) for i in body["incidents"])  # type: ignore

    assert seen(default) == seen(stricter)


def test_each_cordon_lists_the_steps_the_responder_would_run(cluster: Path) -> None:
    default = run_replay(cluster)
    drained = run_replay(cluster, policy=CordonPolicy(drain=Drain(enabled=True)))
    for result, drain in ((default, []), (drained, ["evict"])):
        cordons = result.cluster.cordons()
        assert cordons and {c.steps for c in cordons} == {("cordon", "condition", "event", *drain)}
        others = [v for v in result.cluster.verdicts if v.outcome not in ("cordon", "repeat")]
        assert others and all(v.steps == () for v in others)  # nothing acts on the node: no step


def test_each_cordon_says_what_its_remediation_loop_would_do(cluster: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    result = run_replay(cluster)
    lost = [c for c in result.cluster.cordons() if c.node == "gpu-node-03"]
    assert lost and lost[0].remediation is not None
    r = lost[0].remediation
    assert (r["enabled"], r["action"], r["remedy"]) == (False, "reboot_node", "reboot_node")  # Xid 79: RESTART_BM
    assert any(step.startswith("would create Job xidpipe-reboot-") for step in r["plan"])
    assert r["plan"][-1] == "would lift xidpipe's cordon once validation passed"
    on = run_replay(cluster, policy=CordonPolicy(remediation=RemediationPolicy(enabled=True)))
    cordons = on.cluster.cordons()
    assert all(c.remediation is not None and c.remediation["enabled"] for c in cordons)
    assert {c.steps for c in cordons} == {("cordon", "condition", "event", "remediate")}
    assert main(["replay", str(cluster)]) == 1
    out = capsys.readouterr().out
    assert "remediation (remediation is off in this policy): reboot_node:" in out
    assert "would drain: node" in out


def test_the_breaker_holds_cordons_past_the_pool_limit(tmp_path: Path) -> None:
    root = tmp_path / "small-pool"
    shutil.copytree(SAMPLES, root)  # no replay.json: the pool is the 5 recorded nodes
    result = run_replay(root)
    allowed = pool_allowance(CordonPolicy(), 5)
    outcomes = [v.outcome for v in result.cluster.verdicts]
    assert len(result.cluster.cordons()) == allowed
    assert "trip_breaker" in outcomes and result.cluster.breaker.tripped
    tripped = outcomes.index("trip_breaker")
    assert "cordon" not in outcomes[tripped:]  # nothing passes a tripped breaker


def test_records_are_merged_in_event_time_with_each_node_in_order(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.log").write_text("Nov 25 10:00:00 a kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=p\n"
                                "Nov 25 10:00:02 a kernel: unrelated line\n"
                                "Nov 25 10:00:04 a kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=p\n")
    stamp = int(datetime(2026, 11, 25, 10, 0, 3, tzinfo=UTC).timestamp() * 1e6)
    (root / "b.log").write_text(json.dumps({"__REALTIME_TIMESTAMP": str(stamp),
                                            "MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 31, pid=2"}) + "\n")
    pods = PodAssignments(node="b", record_id="pods:b:1", changed_at=datetime(2026, 11, 25, 10, 0, 3, tzinfo=UTC))
    (root / "state.jsonl").write_text(pods.model_dump_json() + "\n")
    records = ClusterRecords(open_cluster_dir(root), now=datetime(2026, 11, 30, tzinfo=UTC))
    order = [(r.node, r.kind) for r in records]
    assert order == [("a", "kernel_line"), ("b", "pod_assignments"), ("b", "kernel_line"), ("a", "kernel_line")]
    assert (records.lines_read, records.lines_kept) == (4, 3)  # the unrelated line is dropped as by the agent
    kept = [r for r in ClusterRecords(open_cluster_dir(root)) if isinstance(r, KernelLine)]
    assert all(r.fault and r.record_id.startswith("file:") and r.file_offset is not None for r in kept)


def test_a_log_s_last_line_without_a_newline_is_read(tmp_path: Path) -> None:
    """As `xidpipe scan` reads it: the fault on the last line counts though the line has no newline."""
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.log").write_text("Nov 25 10:00:00 a kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=p\n"
                                "Nov 25 10:00:09 a kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=p, An "
                                "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer")
    result = run_replay(root)
    assert result.stats.lines_read == 2
    assert sorted(c for i in result.incidents for c in i["codes"]) == ["Xid 13", "Xid 48"]


def test_a_log_without_gpu_faults_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "quiet"
    root.mkdir()
    (root / "n1.log").write_text("Nov 25 10:00:00 n1 kernel: NVRM: GPU 0000:18:00.0: persistence mode enabled\n"
                                 "Nov 25 10:00:01 n1 kernel: eth0: link up\n")
    code, body = replay_json(capsys, str(root))
    assert code == 0 and body["incidents"] == [] and body["cordons"] == [] and body["tickets"] == []


@pytest.mark.parametrize("case", ["missing", "no_logs", "log_is_a_directory", "bad_state", "unknown_version",
                                  "bad_policy"])
def test_unreadable_input_exits_2_naming_the_file(case: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "n1.log").write_text("Nov 25 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off\n")
    args = [str(root)]
    named = root
    if case == "missing":
        named = tmp_path / "nowhere"
        args = [str(named)]
    elif case == "no_logs":
        (root / "n1.log").unlink()
    elif case == "log_is_a_directory":
        named = root / "n2.log"
        named.mkdir()
    elif case == "bad_state":
        named = root / "state.jsonl"
        named.write_text('{"schema_version": 1, "kind": "inventory", "node": "n1", "record_id": "i"}\n{"kind": 5}\n')
    elif case == "unknown_version":
        named = root / "replay.json"
        named.write_text('{"format": "xidpipe-replay", "version": 2}')
    else:
        named = tmp_path / "policy.yaml"
        named.write_text("rules: [{name: x, action: sometimes}]\n")
        args += ["--policy", str(named)]
    assert main(["replay", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and err.startswith("xidpipe replay: ") and str(named) in err
    assert len(err.splitlines()) == 1 or case == "bad_policy"
    if case == "bad_state":
        assert f"{named}:2:" in err


@pytest.mark.parametrize("node", [".", "javascript:alert(1)", "Gpu-Node-1", "gpu_node_1"])
def test_a_log_named_for_no_node_exits_2_naming_the_file(node: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "n1.log").write_text("Nov 25 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off\n")
    named = root / f"{node}.log"
    named.write_text("Nov 25 10:00:00 x kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off\n")
    assert main(["replay", str(root)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"xidpipe replay: {named}: not a node name")


def test_a_named_database_keeps_the_history_and_must_start_empty(cluster: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    first = run_replay(cluster, database_url=url)
    from streams.store import Store

    store = Store(url)
    try:
        stored = {i["incident_id"] for i in store_reads.incidents(store) if not i["merged_into"]}
        assert stored == {i["id"] for i in first.incidents}
    finally:
        store.dispose()
    with pytest.raises(ReplayInputError, match="already holds incidents"):
        run_replay(cluster, database_url=url)


def _failing_gpu(root: Path) -> Path:
    """One GPU that fails three different jobs over 36 hours (one Xid 13 each, 18 hours apart)."""
    root.mkdir()
    uuid = "GPU-5f1c2a9e-0b7d-4c1e-9a43-7d2e11a0c001"
    start = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
    lines, state = [], []
    for k in range(3):
        at = start + timedelta(hours=18 * k)
        pods = PodAssignments(node="n1", record_id=f"pods:n1:{k}", changed_at=at - timedelta(minutes=5),
                              assignments=(DeviceAssignment(device_id=uuid, gpu_id=uuid, resource_name="nvidia.com/gpu",
                                                            namespace="team", pod=("bert", "vllm", "resnet")[k],
                                                            container="main"),))
        state.append(pods.model_dump_json())
        lines.append(f"{at.isoformat()} n1 kernel: NVRM: Xid (PCI:0000:18:00): 13, pid={100 + k}, name=train, "
                     "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address")
    inventory = GpuInventory(node="n1", record_id="inv:n1", emitted_at=start - timedelta(hours=1),
                             gpus=(GpuInfo(index=0, uuid=uuid, pci_bus_id="00000000:18:00.0"),))
    (root / "n1.log").write_text("\n".join(lines) + "\n")
    (root / "state.jsonl").write_text("\n".join([inventory.model_dump_json(), *state]) + "\n")
    return root


def test_the_worker_s_classification_window_is_backtested_from_its_settings_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default 24 h window the three faults are three jobs' own; the worker's settings file
    (`worker_policy`, given as --config or XIDPIPE_CONFIG) widens it to 48 h, and replay finds what that
    worker would: one GPU failing different jobs."""
    root = _failing_gpu(tmp_path / "c")
    config = tmp_path / "xidpipe.yaml"
    config.write_text("worker_policy:\n  classify_window_s: 172800\n")

    code, body = replay_json(capsys, str(root))
    assert code == 1
    incidents = body["incidents"]
    assert isinstance(incidents, list)
    assert sorted((i["component"], i["classification"], i["count"]) for i in incidents) == [
        ("workload", "application", 1)] * 3

    for args in ([str(root), "--config", str(config)], ["--config", str(config), str(root)]):
        code, body = replay_json(capsys, *args)
        (gpu,) = body["incidents"]  # type: ignore[misc]
        assert (gpu["component"], gpu["classification"], gpu["count"]) == ("gpu", "suspected_hardware", 3)
    monkeypatch.setenv("XIDPIPE_CONFIG", str(config))
    code, body = replay_json(capsys, str(root))
    (gpu,) = body["incidents"]  # type: ignore[misc]
    assert gpu["classification"] == "suspected_hardware"


def test_a_bad_worker_policy_in_the_settings_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _failing_gpu(tmp_path / "c")
    config = tmp_path / "xidpipe.yaml"
    config.write_text("worker_policy:\n  quiet_period_s: -1\n")
    assert main(["replay", str(root), "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "quiet_period_s" in err


def test_incidents_resolve_after_their_quiet_period_and_get_their_tickets_in_event_time(tmp_path: Path) -> None:
    """A double-bit error, then hours later another GPU's: past the quiet period in event time, the first
    incident is resolved, and still gets the ticket the sink opened for it when it opened."""
    root = tmp_path / "c"
    root.mkdir()
    (root / "n1.log").write_text(
        "2026-03-02T00:00:00+00:00 n1 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=p, An uncorrectable "
        "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.\n"
        "2026-03-02T08:00:00+00:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=2, name=p, Contained: SM (0x1). "
        "RST: No, D-RST: No\n")
    result = run_replay(root)
    first, second = sorted(result.incidents, key=lambda i: i["first_seen"])
    assert (first["status"], second["status"]) == ("resolved", "open")
    ticketed = {t["incident_id"]: t["action"] for t in result.sinks.tickets}
    assert ticketed[first["id"]] == "create" and ticketed[second["id"]] == "create"
