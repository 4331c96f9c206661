"""A mixed fleet workload for the scale-out test, and the canonical form its results are compared in.

Sixty nodes in six groups (so every partition of twelve carries every kind of record): one workload's
application faults spread over many nodes, ECC and row-remapping faults, a GPU falling off the bus
with its AER report and the driver's three-line notice, NVLink faults repeated past the cordon
policy's threshold, NVSwitch SXid groups, and a second workload's MMU faults; with inventories, pod
assignments and processes. Every fault is a `/dev/kmsg` line, so each stays an open record until
its node's next line; the input is cut in two phases in the middle of multi-line records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from history.tables import FaultEvent, Incident, OutboxMessage
from models.node_records import NodeRecord
from tests.streams.records import T0, Kmsg, inventory, pci, pods, processes, s

NODES = [f"so-{i:02d}" for i in range(60)]
# Lines that are no fault: nine of them close any open record (the parser ends a group after eight
# unrelated lines), so every record closes on its node's lines, never by the idle flush.
CLOSING = "xfs filesystem being remounted at /var/lib/kubelet supports timestamps until 2038"
CLOSING_LINES = 9


def _xid(k: Kmsg, gpu: int, xid: int, at: datetime, text: str, pid: int | None = None,
         name: str | None = None) -> NodeRecord:
    return k.xid(gpu, xid, at, pid, name, text=text)


def _gpu_lost(k: Kmsg, at: datetime) -> Iterator[NodeRecord]:
    """GPU 3 falls off the bus: the root port's AER report, Xid 79, the driver's lines and notice."""
    dev = pci(3)
    for text in (f"pcieport 0000:60:01.1: AER: Uncorrected (Fatal) error received: {dev}",
                 f"nvidia {dev}: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
                 "(Receiver ID)",
                 f"nvidia {dev}: AER:   device [10de:2330] error status/mask=00000020/00000000",
                 f"nvidia {dev}: AER:    [ 5] SDES                   (First)"):
        yield k.line(text, at)
    yield _xid(k, 3, 79, at + s(0.1), "GPU has fallen off the bus.")
    yield k.line(f"NVRM: GPU {dev}: GPU has fallen off the bus.", at + s(0.1))
    for text in (f"NVRM: The NVIDIA GPU {dev}", "NVRM: (PCI ID: 10de:2330) installed in this system has",
                 "NVRM: fallen off the bus and is not responding to commands."):
        yield k.line(text, at + s(1))


def _sxid(k: Kmsg, at: datetime, link: int) -> Iterator[NodeRecord]:
    head = "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028"
    yield k.line(f"{head}, Non-fatal, Link {link} egress non-posted PRIV error (First)", at)
    yield k.line(f"{head}, Severity 0 Engine instance {link} Sub-engine instance 00", at)
    yield k.line(f"{head}, Data {{{', '.join(['0x00000000'] * 8)}}}", at)


def _node_lines(i: int, node: str, k: Kmsg) -> tuple[list[NodeRecord], list[NodeRecord]]:
    """One node's kernel lines, cut where phase one ends (in the middle of a multi-line record when
    the node has one)."""
    t = T0 + s(i * 0.5)
    group = i % 6
    if group == 0:  # one workload's faults over ten nodes, twice on each (one code: no companion reports,
        # whose joining of a workload incident's last occurrence depends on the order nodes are read in)
        a = [_xid(k, 0, 13, t + s(10), "Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): Out Of Range Address",
                  4000 + i, "pt_main_thread")]
        b = [_xid(k, 0, 13, t + s(200), "Graphics SM Warp Exception on (GPC 2, TPC 0, SM 1): Illegal Instruction",
                  4000 + i, "pt_main_thread")]
    elif group == 1:  # ECC: a DBE with its row remapping, contained and uncontained errors
        a = [_xid(k, 1, 48, t + s(10), "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                  "framebuffer at partition 6, subpartition 0."),
             _xid(k, 1, 63, t + s(10.5), "Row Remapper: New row (0x0000000000bf12a0) was marked for remapping, "
                  "reset gpu to activate.")]
        b = [_xid(k, 2, 94, t + s(40), "Contained: SM (0x1). RST: No, D-RST: No", 7000 + i, "trainer"),
             _xid(k, 1, 64, t + s(150), "Row Remapper: Failed to remap row"),
             _xid(k, 2, 95, t + s(160), "Uncontained: FBHUB. RST: Yes, D-RST: No")]
    elif group == 2:  # a GPU falls off the bus; phase one ends inside its AER report
        lost = list(_gpu_lost(k, t + s(20)))
        a, b = lost[:2], lost[2:]
    elif group == 3:  # NVLink faults repeated on one GPU, every 30 s
        links = [_xid(k, 2, 74, t + s(10 + 30 * n), f"NVLink: fatal error detected on link {12 + n % 4}(0x0, 0x0, "
                      "0x10000, 0x0, 0x0, 0x0, 0x0)") for n in range(6)]
        a, b = links[:3], links[3:]
    elif group == 4:  # NVSwitch SXid groups, the kernel's identity lines of GPU 0; phase one ends in a group
        first = [*k.identity(0, t + s(5)), *_sxid(k, t + s(30), 32)]
        a, b = first[:3], [*first[3:], *_sxid(k, t + s(170), 33)]
    else:  # another workload's MMU faults, and a contained error on GPU 0
        a = [_xid(k, 1, 31, t + s(15), "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
                  "faulted @ 0x7f2a_12345000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", 5000 + i, "resnet")]
        b = [_xid(k, 0, 94, t + s(120), "Contained: SM (0x1). RST: No, D-RST: No")]
    return a, [*b, *(k.line(CLOSING, t + s(290 + n), fault=False) for n in range(CLOSING_LINES))]


def workload() -> tuple[list[NodeRecord], list[NodeRecord], list[NodeRecord]]:
    """(node state, phase one, phase two): inventories, pods and processes; each node's first lines; the
    rest of the lines. The state is stored before any line is published: state read after a fault
    attributes it, but a GPU incident opened under the GPU's PCI address keeps that key, and a merged
    incident is left behind (see `IncidentGrouping.repair`): the two runs would differ in those.

    Within a phase the nodes' lines are interleaved by time, as many agents publish them."""
    state: list[NodeRecord] = []
    first: list[tuple[datetime, int, NodeRecord]] = []
    second: list[tuple[datetime, int, NodeRecord]] = []
    for i, node in enumerate(NODES):
        k = Kmsg(node, boot_id=f"b-{node}")
        state.append(inventory(node, T0 - s(600), gpus=4))
        if i % 6 == 0:
            state.append(pods(node, T0 - s(300), {0: ("ml", f"burst-7d9f8c6b5-{i:05d}", "main")}))
            state.append(processes(node, T0 - s(290), {4000 + i: 0}))
        elif i % 6 == 5:
            state.append(pods(node, T0 - s(300), {1: ("vision", f"resnet-5b6c7d8e9f-{i:05d}", "train")}))
        a, b = _node_lines(i, node, k)
        first += [(_at(r), n, r) for n, r in enumerate(a, start=i * 100)]
        second += [(_at(r), n, r) for n, r in enumerate(b, start=i * 100 + 50)]
    return (state, [r for _, _, r in sorted(first, key=lambda x: x[:2])],
            [r for _, _, r in sorted(second, key=lambda x: x[:2])])


def _at(record: NodeRecord) -> datetime:
    at: datetime = getattr(record, "observed_at")  # noqa: B009 (every record of the phases is a kernel line)
    return at


# -- the canonical form ---------------------------------------------------------------------------------

_TIMED_OPERATIONS = ("update:",)  # ticket updates follow the update interval (wall clock): not compared


def canonical(url: str) -> dict[str, Any]:
    """What a run made, free of timing: incidents, fault events, requested actions and messages.

    Incident versions and the cordon candidates' version keys count batches, fleet incidents' opening
    time depends on which batch first counted enough nodes: those are left out, their substance kept.
    """
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            incidents = [dict(r._mapping) for r in conn.execute(sa.select(Incident))]
            events = [dict(r._mapping) for r in conn.execute(sa.select(FaultEvent))]
            outbox = [dict(r._mapping) for r in conn.execute(sa.select(OutboxMessage))]
    finally:
        engine.dispose()
    # An incident over many nodes is named after the report read first, which depends on the order the
    # partitions are read in: fleet and workload incidents are known by their component here.
    fleet = {i["incident_id"]: f"{i['component']}:{i['component_id']}" for i in incidents
             if i["component"] in ("fleet", "workload")}

    def ref(incident_id: str | None) -> str | None:
        return fleet.get(incident_id or "", incident_id)

    return {
        "incidents": Counter(
            (ref(i["incident_id"]), i["fingerprint"], i["component"], i["component_id"],
             i["node"] if i["component"] != "workload" else "", i["gpu"],
             i["family"], i["category"], i["rule"], i["count"], i["status"], tuple(sorted(i["codes"] or ())),
             ref(i["merged_into"]), tuple(sorted(i["nodes"] or ())), tuple(sorted(i["pods"] or ())))
            for i in incidents),
        "fault_events": Counter(
            (e["node"], e["record_id"], e["content_hash"], e["code"], e["raw"].count("\n") + 1, e["sources"],
             e["gpu"], e["pod"], e["workload"], e["counted"], ref(e["incident_id"])) for e in events),
        "actions": Counter((ref(o["payload"]["incident_id"]), o["payload"]["kind"], o["payload"]["operation"])
                           for o in outbox if o["stream"] == "actions" and o["payload"]["kind"] != "cordon_candidate"
                           and not str(o["payload"]["operation"]).startswith(_TIMED_OPERATIONS)),
        "changes": Counter((ref(o["payload"]["incident"]["incident_id"]), o["payload"]["change"]) for o in outbox
                           if o["stream"] == "incidents" and o["payload"]["change"] in ("opened", "reopened",
                                                                                         "resolved")),
        # one per change, keyed by the row's version (which counts batches): which incidents got one
        "cordon_candidates": sorted({ref(o["payload"]["incident_id"]) or "" for o in outbox
                                     if o["payload"].get("kind") == "cordon_candidate"}),
    }

