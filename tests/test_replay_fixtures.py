"""Recorded clusters written here, replayed through the engine with the example cordon policy:
a job-teardown storm over 60 nodes, contained ECC twice in a day, an NVLink burst refused and then
cordoned on the next burst, and the same fingerprints from `xidpipe scan`, replay and the stream."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from models.cordon_policy import CordonPolicy
from models.kernlog.parser import KernelLogParser
from models.node_records import NodeRecord, encode_node_record
from models.scan import scan
from respond.cordon.policy_file import load_policy
from tests.streams.records import T0, inventory, pci, pods
from xidpipe.replay.run import ReplayResult, run_replay

EXAMPLE_POLICY = Path(__file__).resolve().parents[1] / "deploy" / "policy.example.yaml"


@pytest.fixture(scope="module")
def example_policy() -> CordonPolicy:
    return load_policy(EXAMPLE_POLICY)


def stamp(at: datetime) -> str:
    return at.strftime("[%a %b %d %H:%M:%S %Y]")


def xid(at: datetime, gpu: int, code: int, text: str, pid: int | None = None) -> str:
    bus = pci(gpu)[:-2]
    who = f"pid={pid}, name=python3" if pid else "pid='<unknown>', name=<unknown>"
    return f"{stamp(at)} NVRM: Xid (PCI:{bus}): {code}, {who}, {text}"


def write_cluster(root: Path, logs: dict[str, list[str]], state: list[NodeRecord]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for node, lines in logs.items():
        (root / f"{node}.log").write_text("".join(f"{line}\n" for line in lines))
    (root / "state.jsonl").write_bytes(b"".join(encode_node_record(r) + b"\n" for r in state))
    return root


def test_a_job_teardown_storm_over_60_nodes_is_one_workload_incident_never_cordoned(
        tmp_path: Path, example_policy: CordonPolicy) -> None:
    nodes = [f"gpu-{n:03d}" for n in range(60)]
    job = "llm-pretrain"
    state: list[NodeRecord] = []
    logs: dict[str, list[str]] = {}
    for n, node in enumerate(nodes):
        state.append(inventory(node, T0, gpus=8))
        state.append(pods(node, T0 + timedelta(seconds=1), {g: ("team-llm", f"{job}-{n * 8 + g}", "trainer")
                                                             for g in range(8)}))
        crash = T0 + timedelta(minutes=30, seconds=n % 5)
        logs[node] = [xid(crash, g, 45, "Ch 00000008, errorString CTX SWITCH TIMEOUT", 4000 + g) for g in range(8)]
        logs[node] += [xid(crash + timedelta(seconds=1), g, 13, "Graphics SM Warp Exception", 4000 + g)
                       for g in range(0, 8, 2)]
    result = run_replay(write_cluster(tmp_path / "storm", logs, state), policy=example_policy)
    (incident,) = result.incidents
    assert incident["component"] == "workload" and incident["component_id"] == "team-llm/llm-pretrain/trainer"
    assert incident["classification"] == "application" and incident["count"] >= 480
    assert result.cluster.cordons() == [] and result.sinks.tickets == []
    assert [m["incident_id"] for m in result.sinks.messages] == [incident["id"]]


def cordoned(result: ReplayResult) -> list[tuple[str, str]]:
    return [(c.node, c.rule) for c in result.cluster.cordons()]


def test_contained_ecc_twice_in_a_day_is_cordoned_by_the_example_policy(
        tmp_path: Path, example_policy: CordonPolicy) -> None:
    state: list[NodeRecord] = [inventory("n1", T0)]
    first = [xid(T0 + timedelta(hours=1), 0, 94, "Contained: CE User Channel (0x7). RST: No, D-RST: No")]
    second = [xid(T0 + timedelta(hours=11), 0, 94, "Contained: CE User Channel (0x7). RST: No, D-RST: No")]
    once = run_replay(write_cluster(tmp_path / "once", {"n1": first}, state), policy=example_policy)
    assert cordoned(once) == []
    twice = run_replay(write_cluster(tmp_path / "twice", {"n1": first + second}, state), policy=example_policy)
    # Ten hours apart: the first incident was resolved after its quiet period and the second opened
    # linked to it; the policy's day counts the GPU's two faults all the same.
    first_incident, second_incident = sorted(twice.incidents, key=lambda i: i["first_seen"])
    assert first_incident["status"] == "resolved" and first_incident["fingerprint"] == second_incident["fingerprint"]
    assert cordoned(twice) == [("n1", "contained-ecc-repeats")]


def test_one_contained_ecc_error_in_kern_log_and_syslog_is_one_and_not_cordoned(
        tmp_path: Path, example_policy: CordonPolicy) -> None:
    """Issue #23: a node whose kern.log and syslog both carry the same Xid 94 line (one kernel record, the
    same uptime stamp) had it counted twice, and the contained-ECC rule cordoned the node on one fault."""
    state: list[NodeRecord] = [inventory("n1", T0)]
    record = (f"Nov 29 13:00:00 n1 kernel: [ 3600.250000] NVRM: Xid (PCI:{pci(0)[:-2]}): 94, pid=4242, "
              "name=python3, Contained: CE User Channel (0x7). RST: No, D-RST: No")
    kern_log_then_syslog = [record, record.replace("Nov 29 13:00:00", "2026-11-29T13:00:00.004211+00:00")]
    result = run_replay(write_cluster(tmp_path / "copies", {"n1": kern_log_then_syslog}, state),
                        policy=example_policy)
    (incident,) = result.incidents
    assert incident["codes"] == ["Xid 94"] and incident["count"] == 1
    assert cordoned(result) == []
    assert [v.rule for v in result.cluster.verdicts] == ["contained-ecc-repeats"]


def test_an_nvlink_burst_refused_then_cordoned_on_the_next_burst(
        tmp_path: Path, example_policy: CordonPolicy) -> None:
    state: list[NodeRecord] = [inventory("n2", T0)]
    burst = [xid(T0 + timedelta(hours=1, seconds=i), 1, 74, "NVLink: fatal error detected on link 3") for i in (0, 5)]
    later = [xid(T0 + timedelta(hours=1, minutes=30, seconds=i), 1, 74, "NVLink: fatal error detected on link 3")
             for i in (0, 5)]
    one = run_replay(write_cluster(tmp_path / "one", {"n2": burst}, state), policy=example_policy)
    assert cordoned(one) == []
    refusals = [v for v in one.cluster.verdicts if v.node == "n2"]
    assert refusals and all(v.rule == "nvlink-repeats" for v in refusals)
    both = run_replay(write_cluster(tmp_path / "both", {"n2": burst + later}, state), policy=example_policy)
    assert cordoned(both) == [("n2", "nvlink-repeats")]
    (incident,) = both.incidents
    assert incident["count"] == 4


def test_scan_replay_and_the_stream_give_one_log_the_same_fingerprints(tmp_path: Path) -> None:
    lines = [
        xid(T0, 0, 79, "GPU has fallen off the bus."),
        f"{stamp(T0)} NVRM: GPU {pci(0)}: GPU has fallen off the bus.",
        xid(T0 + timedelta(minutes=5), 2, 48, "An uncorrectable double bit error (DBE) has been detected"),
        f"{stamp(T0 + timedelta(minutes=9))} nvidia-nvswitch1: SXid (PCI:0000:86:00.0): 12028, Non-fatal, "
        "Link 32 egress non-posted PRIV error",
        xid(T0 + timedelta(minutes=20), 1, 13, "Graphics SM Warp Exception", 77),
    ]
    root = write_cluster(tmp_path / "one-log", {"gpu-n9": lines}, [])
    parser = KernelLogParser()
    records = [r for i, line in enumerate(lines, 1) for r in parser.feed(line, i)] + list(parser.finish())
    scanned = {i.fingerprint for i in scan(("gpu-n9", r) for r in records)}
    replayed = {i["fingerprint"] for i in run_replay(root).incidents}
    assert len(scanned) == 4 and scanned == replayed


def test_a_backlog_read_an_hour_late_is_attributed_to_the_pods_of_the_fault_s_time(tmp_path: Path) -> None:
    # GPU 0 ran job a until 12:40, then job b. Its Xid at 12:30 is read with everything else, long after.
    state: list[NodeRecord] = [
        inventory("n3", T0),
        pods("n3", T0 + timedelta(minutes=1), {0: ("ml", "a-0", "w")}),
        pods("n3", T0 + timedelta(minutes=40), {0: ("ml", "b-0", "w")}),
    ]
    lines = [xid(T0 + timedelta(minutes=30), 0, 31, "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f")]
    (incident,) = run_replay(write_cluster(tmp_path / "late", {"n3": lines}, state)).incidents
    assert incident["component_id"] == "ml/a/w" and incident["pods"] == ["ml/a-0/w"]
