"""GPU health scenarios through the whole agent and into the stream: the agent (`build_agent`, on a
simulated clock) reads the fake libnvidia-ml.so.1 through nvidia-ml-py's real ctypes code and publishes
to a real broker; its records are read back from Kafka, decoded and mapped as the worker does, and
stored in the store, where they open (or join) incidents.

The table: each signal firing, each joining the Xid it belongs to, thresholds just under and just
over, on sixteen fake GPUs at once (one scenario each); then a driver that did not load, NVML hung,
and 24 hours of flat counters, each an agent run of its own.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from models.dead_letter import DeadLetter
from models.node_records import KERNEL_TOPIC, NVML_TOPIC, STATE_TOPIC
from models.stream_policy import PipelinePolicy
from models.topics import topology
from streams.decode import decode_message
from streams.items import ItemMapper
from streams.store import Store
from tests.agents.test_nvml import write_config

pytestmark = pytest.mark.kafka

T0 = datetime(2026, 11, 27, 0, 0, tzinfo=UTC)  # the simulated start, on a clock hour


def bus(i: int) -> str:
    return f"0000:{0x10 + i:02x}:00.0"


def uuid(i: int) -> str:
    return f"GPU-5c3a{i:04d}-0d1e-4f00-9a00-{i:012d}"


@dataclass(frozen=True)
class Scenario:
    name: str
    gpu: str  # the fake GPU's own keys
    steps: tuple[tuple[int, str], ...] = ()  # (simulated second, its readings from then on)
    lines: tuple[tuple[int, str], ...] = ()  # (simulated second, kernel line of this GPU)
    expect: tuple[str, ...] = ()  # the codes of the GPU's one incident, in order; () for none
    count: int = 1


H100 = "nvlinks=4 recovery=0 pcie_replay=0 pcie_gen=5 pcie_gen_max=5 pcie_width=16 pcie_width_max=16 reasons=0x0 " \
       "temp=60 margin=27 power_draw=400000 ecc_sbe=0"


def _sbe(last_hour: int) -> tuple[tuple[int, str], ...]:
    """Three hours at 2 single-bit errors an hour, then `last_hour` in the fourth."""
    base = tuple((1800 * n, f"ecc_sbe={n}") for n in range(1, 7))
    return (*base, *((10800 + 900 * k, f"ecc_sbe={6 + last_hour * k // 4}") for k in range(1, 5)))


def _slow(minutes: int, at: int) -> tuple[tuple[int, str], ...]:
    return ((at, "reasons=0x8 margin=2"), (at + 60 * minutes, "reasons=0x0 margin=27"))


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("remap pending", H100, ((600, "remap=0,1,1,0"),), expect=("row_remap_pending",)),
    Scenario("remap failure", H100, ((600, "remap=0,512,0,1"),), expect=("row_remap_failure",)),
    Scenario("remap pending joins its Xid 63", H100, ((1205, "remap=0,1,1,0"),),
             ((1200, "Row Remapper: New row marked for remapping, reset gpu to activate."),),
             ("Xid 63", "row_remap_pending")),
    Scenario("recovery action joins its Xid 154", H100, ((1805, "recovery=1"),),
             ((1800, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"),),
             ("Xid 154", "recovery_action")),
    Scenario("retired pages at the limit", H100 + " unsupported=remap retired_sbe=0 retired_dbe=0 retired_pending=0",
             ((600, "retired_sbe=60 retired_dbe=3"),), expect=("retired_pages_limit",)),
    Scenario("retired pages one under", H100 + " unsupported=remap retired_sbe=0 retired_dbe=0 retired_pending=0",
             ((600, "retired_sbe=59 retired_dbe=3"),)),
    Scenario("single-bit trend", H100, _sbe(40), expect=("ecc_sbe_trend",)),
    Scenario("single-bit errors under the floor", H100, _sbe(9)),
    Scenario("NVLink down", H100, ((2400, "nvlink_down=2"),), expect=("nvlink_down",)),
    Scenario("NVLink replays", H100, ((3000, "nvlink_replay=1"),), expect=("nvlink_errors",)),
    Scenario("PCIe link narrow", H100, ((600, "pcie_width=8"),), expect=("pcie_link",)),
    Scenario("PCIe replays 8 a minute", H100, ((3600, "pcie_replay=8"),)),
    Scenario("PCIe replays 9 a minute", H100, ((3600, "pcie_replay=9"),), expect=("pcie_link",)),
    Scenario("thermal 6 of 10 minutes", H100, _slow(6, 4200), expect=("thermal_slowdown",)),
    Scenario("thermal 5 of 10 minutes", H100, _slow(5, 4200)),
    Scenario("GPU gone joins its Xid 79", H100, ((5400, "lost=1"),), ((5400, "GPU has fallen off the bus."),),
             ("Xid 79", "GPU missing", "gpu_count")),
)
RUN_S = 4 * 3600 + 300


class AgentRun:
    """`tests.agents.health_agent` in a subprocess, driven line by line."""

    def __init__(self, lib: Path, work: Path, node: str, bootstrap: str, config: str, gpus: int,
                 interval_s: float = 60.0, **settings: Any) -> None:
        self.work = work
        self.node = node
        (work / "nvml.conf").touch()
        write_config(work / "nvml.conf", config)
        sysfs = work / "sys"
        for i in range(gpus):
            dev = sysfs / "bus" / "pci" / "devices" / bus(i)
            dev.mkdir(parents=True)
            (dev / "vendor").write_text("0x10de\n")
            (dev / "class").write_text("0x030200\n")
        (work / "kern.log").write_text("")
        agent = {"node": node, "bootstrap_servers": bootstrap, "state_dir": str(work / "state"), "source": "file",
                 "log_file": str(work / "kern.log"), "nvml_enabled": True, "podresources_enabled": False,
                 "evidence_enabled": False, "metrics_port": None, "proc_root": str(work / "proc"),
                 "sysfs_root": str(sysfs), "modules_root": str(work / "modules"), "health_interval_s": interval_s,
                 "nvml_call_timeout_s": 0.5, "inventory_check_s": 0.3, "nvml_event_wait_ms": 100, **settings}
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "XIDPIPE_FAKE_NVML_CONFIG": str(work / "nvml.conf"),
               "XIDPIPE_FAKE_NVML_CLOCK": str(work / "clock")}
        with open(work / "agent.log", "w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.agents.health_agent", json.dumps(agent), str(work / "clock"),
                 T0.isoformat()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, text=True)
        self.out: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.expect("ready", 120)
        self.at = 0

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.put(json.loads(line))

    def expect(self, kind: str, timeout_s: float = 600) -> dict[str, Any]:
        try:
            got = self.out.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no {kind} from the agent: {(self.work / 'agent.log').read_text()[-3000:]}") from None
        assert got["kind"] == kind, got
        return got

    def send(self, command: str, reply: str, timeout_s: float = 600) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.expect(reply, timeout_s)

    def until(self, second: int) -> None:
        if second > self.at:
            self.send(f"advance {second - self.at}", "advanced")
            self.at = second

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.send("flush", "flushed", 120)
            self.send("quit", "stopped", 120)
        self.proc.wait(60)


def read_all(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every record on `topic` now (up to its end offsets when called)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        if topic not in consumer.topics():
            return []  # nothing was ever published there
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(parts)
        out: list[dict[str, Any]] = []
        while any(consumer.position(p) < ends[p] for p in parts):
            for batch in consumer.poll(timeout_ms=500).values():
                out.extend(json.loads(r.value) for r in batch)
        return out
    finally:
        consumer.close()


def stream(bootstrap: str, node: str, store: Store) -> list[dict[str, Any]]:
    """Every record of the node on the agent's topics (all published: the agent flushed its spool before it
    stopped), read back from Kafka, decoded and mapped as the worker does, into the store; the incidents it
    published, the latest state of each."""
    topo = topology()
    mapper = ItemMapper(policy=store.policy)
    items = []
    for topic in (STATE_TOPIC, KERNEL_TOPIC, NVML_TOPIC):
        for i, r in enumerate(x for x in read_all(bootstrap, topic) if x.get("node") == node):
            rec = decode_message(topic=topic, partition=0, offset=i, key=node.encode(), value=json.dumps(r).encode(),
                                 kinds=topo.kinds_for(topic))
            assert not isinstance(rec, DeadLetter), rec
            items.extend(mapper.items(rec, topic))
    result = store.process([*items, *mapper.flush_all()])
    out: dict[str, dict[str, Any]] = {}
    for o in result.outgoing:
        if o.stream == "incidents":
            out[o.payload["incident"]["incident_id"]] = o.payload["incident"]
    return list(out.values())


def fault_messages(store: Store) -> list[str]:
    import sqlalchemy as sa

    from history.tables import FaultEvent

    with store.engine.connect() as c:
        return list(c.execute(sa.select(FaultEvent.message)).scalars())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store(f"sqlite:///{tmp_path / 'health.db'}", PipelinePolicy(update_interval_s=0))
    st.create_schema()
    yield st
    st.dispose()


def test_the_scenario_table_through_the_agent_into_the_stream(fake_nvml_lib: Path, tmp_path: Path,
                                                              kafka_bootstrap: str, unique_node: str,
                                                              store: Store) -> None:
    gpus = "\n".join(f"gpu uuid={uuid(i)} bus=0000{bus(i).upper()} {sc.gpu}" for i, sc in enumerate(SCENARIOS))
    steps = "\n".join(f"at {t} gpu={i} {keys}" for i, sc in enumerate(SCENARIOS) for t, keys in sc.steps)
    run = AgentRun(fake_nvml_lib, tmp_path, unique_node, kafka_bootstrap, f"driver 550.54.15\n{gpus}\n{steps}\n",
                   len(SCENARIOS))
    try:
        lines = sorted((t, i, text) for i, sc in enumerate(SCENARIOS) for t, text in sc.lines)
        for t, i, text in lines:
            run.until(t)
            xid = {"Row": 63, "GPU recovery": 154, "GPU has": 79}[next(k for k in ("Row", "GPU recovery", "GPU has")
                                                                     if text.startswith(k))]
            run.send(f"line NVRM: Xid (PCI:{bus(i)[:-2]}): {xid}, pid='<unknown>', name=<unknown>, {text}", "written")
        run.until(RUN_S)
    finally:
        run.stop()
    incidents = stream(kafka_bootstrap, unique_node, store)
    by_gpu = {}
    for inc in incidents:
        by_gpu.setdefault(inc["gpu"], []).append(inc)
    table = []
    for i, sc in enumerate(SCENARIOS):
        mine = by_gpu.get(uuid(i), [])
        table.append((sc.name, [(m["codes"], m["count"]) for m in mine]))
    expected = [(sc.name, [(list(sc.expect), sc.count)] if sc.expect else []) for sc in SCENARIOS]
    print("\n".join(f"{name:40} {got}" for name, got in table))  # the table, for the record (pytest -s)
    assert table == expected
    assert not [inc for inc in incidents if inc["gpu"] not in {uuid(i) for i in range(len(SCENARIOS))}]


def test_a_driver_that_did_not_load_is_one_node_fault_that_names_the_kernels(
        fake_nvml_lib: Path, tmp_path: Path, kafka_bootstrap: str, unique_node: str, store: Store) -> None:
    built_for = "5.15.0-1-fake"
    (tmp_path / "modules" / built_for / "updates" / "dkms").mkdir(parents=True)
    (tmp_path / "modules" / built_for / "updates" / "dkms" / "nvidia.ko").write_bytes(b"\x7fELF...")
    state = tmp_path / "state"
    state.mkdir()
    (state / "gpu-health.json").write_text('{"gpus_seen_most": 8}')  # the GPUs it had before the reboot
    run = AgentRun(fake_nvml_lib, tmp_path, unique_node, kafka_bootstrap, "init_error 9\ngpu uuid=GPU-x\n", 8,
                   interval_s=10.0)
    try:
        run.until(10)
        run.send("line NVRM: No NVIDIA GPU found.", "written")
        run.until(60)
    finally:
        run.stop()
    [incident] = stream(kafka_bootstrap, unique_node, store)
    assert (incident["component"], incident["family"], incident["count"]) == ("node", "driver", 1)
    assert sorted(incident["codes"]) == ["driver_error", "driver_load"]
    [message] = [m for m in fault_messages(store) if "built for" in m]
    assert f"built for {built_for} but the node runs {os.uname().release}" in message


def test_nvml_that_hangs_is_a_fault_of_the_nodes_driver_and_the_agent_runs_on(
        fake_nvml_lib: Path, tmp_path: Path, kafka_bootstrap: str, unique_node: str, store: Store) -> None:
    config = f"gpu uuid={uuid(0)} bus=0000{bus(0).upper()} {H100}\nat 20 gpu=0 recovery=0\n" \
             "hang func=nvmlDeviceGetFieldValues ms=120000\n"
    run = AgentRun(fake_nvml_lib, tmp_path, unique_node, kafka_bootstrap, config, 1, interval_s=10.0)
    try:
        run.until(60)
    finally:
        run.stop()
    [incident] = stream(kafka_bootstrap, unique_node, store)
    assert (incident["component"], incident["codes"]) == ("node", ["nvml_unresponsive"])


def test_24_hours_of_flat_counters_produce_no_fault(fake_nvml_lib: Path, tmp_path: Path, kafka_bootstrap: str,
                                                    unique_node: str, store: Store) -> None:
    gpus = "\n".join(f"gpu uuid={uuid(i)} bus=0000{bus(i).upper()} {H100} ecc_sbe=7 pcie_replay=3" for i in range(2))
    run = AgentRun(fake_nvml_lib, tmp_path, unique_node, kafka_bootstrap, f"{gpus}\n", 2)
    try:
        run.until(24 * 3600)
    finally:
        run.stop()
    incidents = stream(kafka_bootstrap, unique_node, store)
    assert incidents == [], [(i["codes"], i["reason"]) for i in incidents]
    published = {r["record_id"]: r for r in read_all(kafka_bootstrap, NVML_TOPIC)  # at least once: by record id
                 if r.get("node") == unique_node and r["kind"] == "gpu_health"}
    assert {r["published_for"] for r in published.values()} == {"first", "heartbeat"}
    assert len(published) == 2 * (24 * 6 + 1), len(published)  # a heartbeat every 10 minutes, never a poll's
