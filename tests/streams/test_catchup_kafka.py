"""A worker that catches up after a long outage, in bounded memory.

With the worker stopped, a backlog that stands for hours of a few hundred nodes piles up on the real
Kafka broker: each node's inventory and pod assignments, then its GPU kernel lines (driver banners,
persistence mode, each GPU's identity and serial pair), with a known set of faults on one node in ten
(a GPU that falls off the bus with the driver's three-line notice, double-bit ECC errors with their row
remapping, repeated NVLink errors). Then one worker process starts and must:

- drain it: the group's committed offsets reach the end of every input partition;
- store exactly the fault events and incidents the input implies: those the in-process intake (the
  worker's own engine, without Kafka) makes of the faulting nodes' records, one fault event per fault
  record produced, and one fleet incident per fault family over its ten nodes, however the worker
  interleaved the partitions;
- stay within a memory bound derived from the per-node cost and the batch limits, far below what
  holding the backlog would take.

It prints the catch-up rate (messages per second) and the peak memory.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from models.node_records import KernelLine, NodeRecord, encode_node_record
from models.topics import topology
from models.wire import topic_for
from streams.intake import Intake, Message
from streams.items import ParserBounds
from streams.runner import WorkerProcess, consumer_lag, produce
from streams.settings import WorkerSettings
from streams.store import Store
from tests import store_reads
from tests.polling import poll
from tests.streams.records import T0, Kmsg, inventory, pci, pods, s, serial, uuid
from tests.streams.scaleout_workload import CLOSING, CLOSING_LINES, canonical
from tests.streams.workers import worker_settings, worker_starter

NODES = 300
GPUS = 8
LINES = 400  # background kernel lines per node
FAULT_EVERY = 10  # one node in this many faults
PARTITIONS = 8
DRAIN_S = 600.0  # a generous bound for the drain on a loaded 2-core machine

NOTICE = ("NVRM: The NVIDIA GPU {dev}", "NVRM: (PCI ID: 10de:2330) installed in this system has",
          "NVRM: fallen off the bus and is not responding to commands.")


def _background(k: Kmsg, node: int, i: int, at: datetime) -> list[KernelLine]:
    """The `i`th group of GPU lines a healthy node's agent forwards (as `benchmarks/worker_memory_bench.py`)."""
    g = i % GPUS
    kind = i % 6
    if kind == 0:
        return [k.line(f"NVRM: GPU at PCI:{pci(g)[:-2]}: {uuid(k.node, g)}", at, fault=False),
                k.line(f"NVRM: GPU Board Serial Number: {serial(k.node, g)}", at, fault=False)]
    text = {1: f"NVRM: GPU {pci(g)}: persistence mode enabled",
            2: "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
            3: f"nvidia {pci(g)}: enabling device (0000 -> 0003)",
            4: f"NVRM: GPU {pci(g)}: RmInitAdapter succeeded"}.get(
        kind, f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.54.15 (node {node})")
    return [k.line(text, at, fault=False)]


def _faults(k: Kmsg, node: int, at: datetime) -> tuple[list[KernelLine], int]:
    """One faulting node's fault lines and how many fault records they make (a multi-line notice is one)."""
    kind = (node // FAULT_EVERY) % 3
    if kind == 0:  # GPU 2 falls off the bus: the Xid, the driver's line, its three-line notice
        dev = pci(2)
        lines = [k.xid(2, 79, at, text="GPU has fallen off the bus."),
                 k.line(f"NVRM: GPU {dev}: GPU has fallen off the bus.", at)]
        lines += [k.line(text.format(dev=dev), at + s(0.5)) for text in NOTICE]
        return lines, 3
    if kind == 1:  # a double-bit ECC error on GPU 1 and its row remapping
        return [k.xid(1, 48, at, text="An uncorrectable double bit error (DBE) has been detected on GPU in the "
                      "framebuffer at partition 6, subpartition 0."),
                k.xid(1, 63, at + s(0.5), text="Row Remapper: New row (0x0000000000bf12a0) was marked for "
                      "remapping, reset gpu to activate.")], 2
    return [k.xid(3, 74, at + s(30 * n), text=f"NVLink: fatal error detected on link {12 + n}(0x0, 0x0, 0x10000, "
                  "0x0, 0x0, 0x0, 0x0)") for n in range(3)], 3


def backlog() -> tuple[list[NodeRecord], dict[str, int]]:
    """The outage's records in the order many agents publish them (nodes interleaved), and the fault
    records produced per faulting node."""
    per_node: list[list[NodeRecord]] = []
    faults: dict[str, int] = {}
    for n in range(NODES):
        node = f"cu-{n:03d}"
        k = Kmsg(node, boot_id=f"b-{node}")
        recs: list[NodeRecord] = [inventory(node, T0 - s(600), gpus=GPUS),
                                  pods(node, T0 - s(300), {g: (f"team-{n % 40}", f"train-{n}-{g}", "main")
                                                           for g in range(GPUS)})]
        for i in range(LINES):
            at = T0 + s(10 * i)
            # The faulting nodes' faults 20 s apart: each family's ten nodes within 540 s (the fleet window: 600 s)
            if n % FAULT_EVERY == 0 and i == 40 + 2 * (n // FAULT_EVERY):
                lines, count = _faults(k, n, at + s(1))
                recs += lines
                faults[node] = count
            recs += _background(k, n, i, at)
        # Lines that are no fault close any record still open: every record closes on its node's lines.
        recs += [k.line(CLOSING, T0 + s(10 * LINES + j), fault=False) for j in range(CLOSING_LINES)]
        per_node.append(recs)
    out: list[NodeRecord] = []
    for i in range(max(len(r) for r in per_node)):
        out += [r[i] for r in per_node if i < len(r)]
    return out, faults


def reference(records: list[NodeRecord], url: str) -> None:
    """The in-process intake (what the worker's store process runs) over `records`, in their order."""
    topo = topology("", PARTITIONS)
    kinds = {t.name: k for t in topo.inputs if (k := topo.kinds_for(t.name))}
    store = Store(url, cluster="lab")
    store.create_schema()
    intake = Intake(store, kinds, ParserBounds())
    offsets: dict[str, int] = {}
    messages = []
    for rec in records:
        topic = topic_for(rec)
        offsets[topic] = offsets.get(topic, -1) + 1
        messages.append(Message(topic, 0, offsets[topic], rec.node.encode(), encode_node_record(rec)))
    for b, i in enumerate(range(0, len(messages), 2000)):
        intake.handle(b, messages[i:i + 2000], [])
    intake.flush_idle(0.0)
    intake.dispose()


# -- memory of a process tree, from /proc -------------------------------------------------------------

def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(root: int) -> list[int]:
    """`root` and its descendants (the worker, its store process, multiprocessing's helpers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parents.items() if pp in frontier]
        tree += frontier
    return tree


class MemorySampler:
    """The resident memory of a worker's process tree, sampled every 0.2 s; `peak_mb` is the largest sum.

    Each process's own high-water mark (VmHWM) is read at every sample too, so a peak between two
    samples is not missed: their sum (`hwm_mb`) bounds the tree's peak from above."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kb = 0
        self.hwm: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def sample(self) -> int:
        total = 0
        for pid in _tree(self.pid):
            total += _status_kb(pid, "VmRSS")
            self.hwm[pid] = max(self.hwm.get(pid, 0), _status_kb(pid, "VmHWM"))
        self.peak_kb = max(self.peak_kb, total)
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    @property
    def peak_mb(self) -> float:
        return self.peak_kb / 1024

    @property
    def hwm_mb(self) -> float:
        return sum(self.hwm.values()) / 1024


# -- the run ------------------------------------------------------------------------------------------

@dataclass
class CatchUp:
    total: int
    faults: dict[str, int]
    idle_mb: float
    peak_mb: float
    hwm_mb: float
    rate: float
    node_states: int
    worker: dict[str, Any]
    reference: dict[str, Any]


@pytest.fixture(scope="module")
def catchup(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatchUp]:
    """The backlog produced with the worker stopped, then one worker's catch-up, measured; and the
    reference: the faulting nodes' records through the in-process intake (the other nodes' lines are no
    faults: they make no incident and change none)."""
    tmp = tmp_path_factory.mktemp("catchup")
    # Every record closes on its node's next lines, never by the idle flush, so what is stored does not
    # depend on how long a transaction took (as in the scale-out test).
    topics = worker_settings(kafka_bootstrap, f"sqlite:///{tmp / 'worker.db'}", tmp, "catchup",
                             partitions=PARTITIONS, cluster="lab", parser_idle_flush_s=600.0)
    settings = next(topics)
    workers = worker_starter(settings, tmp)
    try:
        yield _run(settings, next(workers), tmp)
    finally:
        for _ in workers:  # kills every worker started
            pass
        for _ in topics:  # deletes the run's topics
            pass


def _run(settings: WorkerSettings, start: Callable[..., WorkerProcess], tmp: Path) -> CatchUp:
    every, faults = backlog()
    # The fleet's inventories and pod assignments reached the worker before the outage (agents send them
    # at start): the worker reads a node's state topic and its kernel topic independently, so a fault
    # read before its node's first inventory is keyed by its PCI address (docs/streams.md), which
    # would make the comparison below depend on the read order rather than on the catch-up.
    kernel_topic = topic_for(Kmsg("cu-probe").line(CLOSING, T0, fault=False))
    state = [r for r in every if topic_for(r) != kernel_topic]
    records = [r for r in every if topic_for(r) == kernel_topic]
    probe_node = Kmsg("cu-probe", boot_id="b-probe")
    probe: list[NodeRecord] = [inventory("cu-probe", T0, gpus=GPUS), *state,
                               *(probe_node.line(CLOSING, T0 + s(j), fault=False) for j in range(CLOSING_LINES))]
    idle_mb = _idle_rss_mb(settings, start, probe)

    produced = time.monotonic()
    total = produce(settings.bootstrap_servers, topology(settings.topic_prefix, PARTITIONS), records, linger_ms=20)
    backlog_mb = sum(len(encode_node_record(r)) for r in records) / 2**20
    print(f"backlog: {total} messages, {backlog_mb:.1f} MiB of values, produced in "
          f"{time.monotonic() - produced:.1f} s")
    assert consumer_lag(settings.bootstrap_servers, settings) == total

    worker = start()
    started = time.monotonic()
    first_progress: list[float] = []

    def on_lag(lag: int) -> None:
        if lag < total and not first_progress:
            first_progress.append(time.monotonic())

    with MemorySampler(worker.pid) as memory:
        _drain(settings, worker, DRAIN_S, on_lag)
        drained = time.monotonic()
        memory.sample()
    assert worker.terminate(30) == 0
    reading = drained - (first_progress[0] if first_progress else started)
    print(f"caught up: {total} messages in {drained - started:.1f} s from the worker's start "
          f"({total / (drained - started):.0f} messages/s), {total / reading:.0f} messages/s from its first commit; "
          f"RSS idle {idle_mb:.0f} MiB, peak {memory.peak_mb:.0f} MiB (sum of the processes' high-water marks "
          f"{memory.hwm_mb:.0f} MiB: {', '.join(f'{kb / 1024:.0f}' for kb in memory.hwm.values())} MiB)")

    ref_url = f"sqlite:///{tmp / 'reference.db'}"
    reference([r for r in every if r.node in faults], ref_url)
    store = Store(settings.database_url)
    try:
        node_states = store_reads.counts(store)["node_state"]
    finally:
        store.dispose()
    return CatchUp(total, faults, idle_mb, memory.peak_mb, memory.hwm_mb, total / reading, node_states,
                   canonical(settings.database_url), canonical(ref_url))


def _idle_rss_mb(settings: WorkerSettings, start: Callable[..., WorkerProcess], probe: list[NodeRecord]) -> float:
    """The RSS of a worker that has stored a few records: its size before any backlog (the fixed cost of
    Python, Faust, SQLAlchemy and the store process)."""
    worker = start()
    produce(settings.bootstrap_servers, topology(settings.topic_prefix, PARTITIONS), probe)
    _drain(settings, worker, 180.0)
    time.sleep(2.0)  # settle
    idle = MemorySampler(worker.pid).sample() / 1024
    assert worker.terminate(30) == 0
    return idle


def _drain(settings: WorkerSettings, worker: WorkerProcess, timeout: float,
           on_lag: Callable[[int], None] | None = None) -> None:
    """Until the group's committed offsets reach the end of every input partition."""
    def caught_up() -> bool:
        lag = consumer_lag(settings.bootstrap_servers, settings)
        if lag > 0 and on_lag is not None:
            on_lag(lag)
        return lag == 0

    poll("the worker to catch up (lag 0)", caught_up, timeout, worker, interval=0.5)


_PARTS = ("fault_events", "incidents", "actions", "changes", "cordon_candidates")


# -- the tests ----------------------------------------------------------------------------------------

def test_a_worker_catches_up_after_a_long_outage_in_bounded_memory(catchup: CatchUp) -> None:
    want, got = catchup.reference, catchup.worker
    # The reference is what the input means: one fault event per fault record produced, on the faulting nodes.
    assert sum(want["fault_events"].values()) == sum(catchup.faults.values())
    assert {k[0] for k in want["fault_events"]} == set(catchup.faults)
    assert {k[2] for k in want["incidents"]} == {"gpu", "fleet"}
    lines = {(k[3], k[4]) for k in want["fault_events"]}
    assert ("fallen off the bus", 3) in lines, sorted(lines)  # the multi-line notice, whole

    fleet = {k[1]: set(k[13]) for k in want["incidents"] if k[2] == "fleet"}
    assert sorted(len(nodes) for nodes in fleet.values()) == [NODES // FAULT_EVERY // 3] * 3
    # The worker stored exactly that: every fault event (with its attribution), every GPU incident with its
    # count, each fleet incident over all its family's nodes (the worker reads the partitions out of
    # event-time order), the requests and changes published for them.
    assert got["fault_events"] == want["fault_events"]
    differ = [part for part in _PARTS if got[part] != want[part]]
    assert not differ, "\n".join(f"{p}: {sorted(set(got[p]) ^ set(want[p]))[:6]}" for p in differ)
    assert catchup.node_states >= 2 * NODES  # every node's inventory and pod assignments


def test_the_catch_up_stays_in_bounded_memory(catchup: CatchUp) -> None:
    # The memory bound, from the worker's configured limits (the defaults this test runs with). A message as
    # Python objects (Faust's event and message, the decoded record of ~470 bytes) is about 3 KiB.
    batch = WorkerSettings.model_fields["batch_max"].default  # 2,000
    event_mib = 3 / 1024
    intake = 6.2  # 20.8 MiB per 1,000 active nodes (worker_memory_bench.py at 2,000 nodes), for these 300
    committer = 3 * batch * event_mib  # batch_max in a transaction, 2 x batch_max waiting (`committer.Batches`): 17.6
    stream_buffer = batch * event_mib  # Faust's buffer, stream_buffer_max (None: batch_max): 5.9
    poll = batch // 4 * event_mib  # the records of one poll, poll_max_records (None: batch_max / 4): 1.5
    fetched = 16 * 1.0  # undecoded fetched bytes, up to 1 MiB per partition (`consumer_max_fetch_size`) of
    # the 16 that hold this backlog (kernel lines, node state)
    # 47 MiB; + 40 % for a loaded machine's allocator: idle + 66 MiB (measured: idle + 50). With Faust's
    # defaults (a buffer of 4,096 events, every fetched record decoded at each poll) the peak was idle + 76
    # to 98 MiB; holding the backlog (143,500 messages) as those objects would take ~420 MiB above idle.
    bound = catchup.idle_mb + 1.4 * (intake + committer + stream_buffer + poll + fetched)
    assert catchup.hwm_mb < bound, f"peak RSS {catchup.hwm_mb:.0f} MiB over the bound {bound:.0f} MiB"
