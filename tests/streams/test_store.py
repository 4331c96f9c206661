"""The SQL store on SQLite and on a real PostgreSQL: dedupe, attribution, merge, storms,
classification in context, reopen, sweeps, fleet incidents and the outbox."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from models.node_records import KernelLine, NodeRecord
from models.stream_policy import PipelinePolicy
from streams.items import Item
from streams.store import BatchResult, Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, items_of, nvml_xid, pci, pods, processes, s, serial, uuid


def test_repeats_are_published_once_per_update_interval(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / 'u.db'}", PipelinePolicy(update_interval_s=0))
    st.create_schema()
    k = Kmsg("n10")
    results = feed(st, items_of([k.xid(0, 13, T0 + s(i), 1, "p") for i in range(3)]), batch=1)
    changes = [o.payload["change"] for r in results for o in r.outgoing if o.stream == "incidents"]
    assert changes == ["opened", "updated", "updated"]
    # each published repeat is offered to the ticket sink once (it decides: comment or nothing)
    tickets = [o.payload["operation"] for r in results for o in r.outgoing
               if o.stream == "actions" and o.payload["kind"] == "ticket"]
    assert tickets == ["create", "update:v2", "update:v3"]
    st.dispose()


def test_a_storm_within_the_update_interval_offers_the_ticket_no_repeats(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / 'v.db'}", PipelinePolicy(update_interval_s=3600))
    st.create_schema()
    k = Kmsg("n11")
    results = feed(st, items_of([k.xid(0, 13, T0 + s(i), 1, "p") for i in range(50)]), batch=5)
    tickets = [o.payload["operation"] for r in results for o in r.outgoing
               if o.stream == "actions" and o.payload["kind"] == "ticket"]
    assert tickets == ["create"]
    st.dispose()


def test_update_times_are_kept_for_the_update_interval_only(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / 'w.db'}", PipelinePolicy(update_interval_s=1.0))
    st.create_schema()
    k, other = Kmsg("n12"), Kmsg("n13")
    (opened,) = [o.payload["incident"] for r in feed(st, items_of([k.xid(0, 13, T0, 1, "p")]))
                 for o in r.outgoing if o.stream == "incidents"]
    assert list(st.caches.updates_sent) == [opened["incident_id"]]
    time.sleep(1.1)  # past the interval: that time no longer holds a repeat back
    feed(st, items_of([other.xid(0, 13, T0 + s(5), 1, "p")]))
    assert opened["incident_id"] not in st.caches.updates_sent and len(st.caches.updates_sent) == 1
    repeat = [o.payload for r in feed(st, items_of([k.xid(0, 13, T0 + s(10), 1, "p")])) for o in r.outgoing
              if o.stream == "incidents"]
    assert [(u["incident"]["incident_id"], u["change"]) for u in repeat] == [(opened["incident_id"], "updated")]
    st.dispose()


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    st = Store(db_url, PipelinePolicy(quiet_period_s=600, fleet_min_nodes=3), cluster="c1")
    st.create_schema()
    yield st
    st.dispose()



def feed(store: Store, items: list[Item], batch: int = 500) -> list[BatchResult]:
    return [store.process(items[i:i + batch]) for i in range(0, len(items), batch)]


def test_attribution_merge_and_redelivery(store: Store) -> None:
    k = Kmsg("n1")
    records: list[NodeRecord] = [
        inventory("n1", T0),
        pods("n1", T0 + s(1), {0: ("ml", "train-7d9f8c6b5-abcde", "main")}),
        processes("n1", T0 + s(2), {4242: 0}),
        k.xid(0, 13, T0 + s(10), 4242, "python3"),
        nvml_xid("n1", 0, 13, T0 + s(10.3), 1),  # the same fault seen by NVML
        nvml_xid("n1", 0, 13, T0 + s(30), 2),  # a second fault, NVML only
    ]
    items = items_of(records)
    (first,) = feed(store, items)
    assert (first.faults, first.merged, first.states) == (2, 1, 3)
    events = store_reads.fault_events(store)
    assert len(events) == 2
    e = events[0]
    assert e["sources"] == "kernel+nvml" and e["raw"].startswith("NVRM: Xid")
    assert (e["gpu_uuid"], e["serial"], e["pci"]) == (uuid("n1", 0), serial("n1", 0), "0000:18:00.0")
    assert (e["namespace"], e["pod"], e["container"], e["pid"]) == ("ml", "train-7d9f8c6b5-abcde", "main", 4242)
    assert e["attribution"]["process"]["container_id"] == "cri-4242"
    (inc,) = store_reads.incidents(store)
    # An application fault of a known pod is its workload's: two faults (the NVML twin counted once).
    assert inc["component"] == "workload" and inc["component_id"] == "ml/train/main"
    assert inc["count"] == 2 and inc["family"] == "application" and inc["category"] == "application"
    assert inc["immediate_action"] == "RESTART_APP" and inc["serial"] == serial("n1", 0)  # where it first faulted
    assert inc["pods"] == ["ml/train-7d9f8c6b5-abcde/main"]
    assert {o.stream for o in first.outgoing} == {"incidents", "actions"}

    # At-least-once redelivery of everything, and of the NVML twin alone: nothing changes.
    again = feed(store, items)[0]
    assert (again.faults, again.merged, again.outgoing) == (0, 0, [])
    assert again.duplicates == len(items)
    twin = items_of([nvml_xid("n1", 0, 13, T0 + s(10.3), 1)])
    assert store.process(twin).duplicates == 1
    assert len(store_reads.fault_events(store)) == 2 and store_reads.incidents(store)[0]["count"] == 2


def test_storm_is_one_incident_and_identity_lines_name_the_gpu(store: Store) -> None:
    k = Kmsg("n2")
    records: list[NodeRecord] = [*k.identity(1, T0)]
    records += [k.xid(1, 48, T0 + s(1 + i * 0.001), text="An uncorrectable double bit error (DBE)")
                for i in range(3000)]
    results = feed(store, items_of(records))
    assert sum(r.faults for r in results) == 3000
    (inc,) = store_reads.incidents(store)
    assert inc["count"] == 3000 and inc["status"] == "open" and inc["family"] == "memory"
    assert (inc["gpu_uuid"], inc["serial"]) == (uuid("n2", 1), serial("n2", 1))
    assert (inc["component"], inc["component_id"]) == ("gpu", uuid("n2", 1))
    assert inc["rule"] == "family:memory" and inc["catalog_version"]
    cordons = [o for r in results for o in r.outgoing if o.payload.get("kind") == "cordon_candidate"]
    assert cordons and {c.payload["incident_id"] for c in cordons} == {inc["incident_id"]}
    # The storm is published once (opened), not per line or per batch, within the update interval.
    changes = [o.payload["change"] for r in results for o in r.outgoing if o.stream == "incidents"]
    assert changes == ["opened"]


def _app_fault(k: Kmsg, gpu: int, at_s: float, pid: int) -> NodeRecord:
    return k.xid(gpu, 13, T0 + s(at_s), pid, "python3")


def test_gpu_that_fails_different_workloads_is_suspected_hardware(store: Store) -> None:
    k = Kmsg("n3")
    # GPU 0 gets three different jobs in turn; each crashes there. The same jobs ran on GPUs 1 and 2.
    jobs = [("ml", "a-0", "w"), ("ml", "b-0", "w"), ("ml", "c-0", "w")]
    records: list[NodeRecord] = [inventory("n3", T0)]
    for i, job in enumerate(jobs):
        t = 100 * (i + 1)
        records.append(pods("n3", T0 + s(t), {0: job, 1: jobs[(i + 1) % 3], 2: jobs[(i + 2) % 3]}))
        records.append(processes("n3", T0 + s(t + 1), {1000 + i: 0}))
        records.append(_app_fault(k, 0, t + 5, 1000 + i))
    results = feed(store, items_of(records), batch=3)
    # Each crash first joins its job's incident; the third makes the pattern: the faults stay with the
    # GPU, whose incident takes them, and the jobs' incidents are resolved as merged into it.
    (inc,) = [i for i in store_reads.incidents(store) if i["status"] == "open"]
    assert (inc["component"], inc["node"], inc["gpu_uuid"]) == ("gpu", "n3", uuid("n3", 0))
    assert inc["category"] == "suspected_hardware", inc["reason"]
    assert "3 different workloads" in inc["reason"] and "ran clean on other GPUs" in inc["reason"]
    assert inc["rule"] == "application:stays-with-gpu" and inc["count"] == 3
    assert inc["workloads"] == ["ml/a/w", "ml/b/w", "ml/c/w"]
    merged = [i for i in store_reads.incidents(store) if i["status"] == "resolved"]
    assert {i["component"] for i in merged} == {"workload"} and len(merged) >= 2
    assert {i["merged_into"] for i in merged} == {inc["incident_id"]}
    assert {e["incident_id"] for e in store_reads.fault_events(store)} == {inc["incident_id"]}
    kinds = {(o.payload.get("kind"), o.payload.get("operation")) for r in results for o in r.outgoing}
    assert ("cordon_candidate", "cordon") in kinds and ("notification", "opened") in kinds


def test_workload_that_follows_across_gpus_is_application(store: Store) -> None:
    k = Kmsg("n4")
    job = ("ml", "bad-0", "w")
    records: list[NodeRecord] = [inventory("n4", T0)]
    for g in range(3):
        t = 100 * (g + 1)
        records.append(pods("n4", T0 + s(t), {g: job}))
        records.append(processes("n4", T0 + s(t + 1), {2000 + g: g}))
        records.append(_app_fault(k, g, t + 5, 2000 + g))
        records.append(_app_fault(k, g, t + 6, 2000 + g))
    results = feed(store, items_of(records), batch=2)
    (inc,) = store_reads.incidents(store)
    assert (inc["component"], inc["component_id"], inc["category"]) == ("workload", "ml/bad/w", "application")
    assert inc["count"] == 6 and "follows the workload" in inc["reason"] and "3 GPUs" in inc["reason"]
    assert not any(o.payload.get("kind") == "cordon_candidate" for r in results for o in r.outgoing)


def test_quiet_then_recurrence_reopens_with_a_link_and_sweep_resolves(store: Store) -> None:
    k = Kmsg("n5")
    feed(store, items_of([inventory("n5", T0), k.xid(2, 79, T0 + s(1))]))
    feed(store, items_of([k.xid(2, 79, T0 + s(2000))]))  # after the 600 s quiet period
    old, new = store_reads.incidents(store)
    assert old["status"] == "resolved" and new["status"] == "open"
    assert new["previous_incident_id"] == old["incident_id"] and old["fingerprint"] == new["fingerprint"]

    from datetime import UTC, datetime, timedelta

    assert store.sweep(datetime.now(UTC)) == []  # arrival time is now: not quiet yet
    out = store.sweep(datetime.now(UTC) + timedelta(seconds=601))
    assert {o.payload.get("change") or o.payload.get("operation") for o in out} == {"resolved"}
    assert [i["status"] for i in store_reads.incidents(store)] == ["resolved", "resolved"]
    assert store.sweep(datetime.now(UTC) + timedelta(seconds=700)) == []


def test_fleet_burst_is_one_fleet_incident(store: Store) -> None:
    results = []
    for n in range(4):
        node = f"rack-{n}"
        results += feed(store, items_of([inventory(node, T0), Kmsg(node).xid(0, 79, T0 + s(10 + n))]))
    (fleet,) = store_reads.fleet_incidents(store)
    assert fleet["family"] == "gpu_lost" and fleet["node"] == "c1" and fleet["status"] == "open"
    assert fleet["component"] == "fleet" and fleet["nodes"] == ["rack-0", "rack-1", "rack-2", "rack-3"]
    ours = [o for r in results for o in r.outgoing if o.stream == "incidents" and o.key == "c1"]
    assert [o.payload["change"] for o in ours] == ["opened", "updated"]


def test_outbox_unsent_until_marked(store: Store) -> None:
    (res,) = feed(store, items_of([inventory("n6", T0), Kmsg("n6").xid(0, 79, T0)]))
    ids = {o.outbox_id for o in res.outgoing}
    assert {o.outbox_id for o in store.unsent(older_than_s=-1)} == ids
    store.mark_sent(sorted(ids)[:2])
    assert {o.outbox_id for o in store.unsent(older_than_s=-1)} == ids - set(sorted(ids)[:2])


def test_evidence_links_to_its_fault(store: Store) -> None:
    from models.node_records import Evidence, EvidenceItem

    line = Kmsg("n7").xid(0, 79, T0)
    ev = Evidence(node="n7", record_id="ev-1", trigger_record_id=line.record_id, xid=79,
                  items=(EvidenceItem(name="nvidia-smi -q", status="ok", size_bytes=3, data="H4sI"),))
    feed(store, items_of([inventory("n7", T0), line]))
    res = store.process(items_of([ev]))
    assert res.evidence == 1
    # late evidence offers the incident's ticket a refreshed dossier, once
    offers = [o.payload for o in res.outgoing if o.stream == "actions"]
    assert [(o["kind"], o["operation"], o["node"]) for o in offers] == [("ticket", "evidence", "n7")]
    again = store.process(items_of([ev]))
    assert again.duplicates == 1 and not [o for o in again.outgoing if o.stream == "actions"]
    counts = store_reads.counts(store)
    assert counts["evidence"] == 1
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from history.tables import EvidenceRecord, FaultEvent

    with Session(store.engine) as sess:
        row = sess.scalars(select(EvidenceRecord)).one()
        event = sess.scalars(select(FaultEvent)).one()
        assert row.fault_event_id == event.id
        assert row.manifest[0]["name"] == "nvidia-smi -q" and "data" not in row.manifest[0]


def test_state_read_after_the_fault_still_attributes_it(store: Store) -> None:
    k = Kmsg("n8")
    feed(store, items_of([k.xid(1, 79, T0 + s(10))]))  # the kernel topic was read first
    (before,) = store_reads.incidents(store)
    assert before["gpu_uuid"] is None and before["gpu"] == "0000:38:00.0"
    (res,) = feed(store, items_of([inventory("n8", T0), pods("n8", T0 + s(5), {1: ("ml", "infer-0", "srv")})]))
    assert [o.payload["change"] for o in res.outgoing] == ["attributed"]
    (after,) = store_reads.incidents(store)
    assert (after["gpu_uuid"], after["serial"], after["pods"]) == (uuid("n8", 1), serial("n8", 1), ["ml/infer-0/srv"])
    (event,) = store_reads.fault_events(store)
    assert (event["gpu_uuid"], event["pod"]) == (uuid("n8", 1), "infer-0")
    # Later faults of the same GPU join the incident opened under its PCI address (the GPU is now known
    # by its UUID); a report of the same bus loss would not count again, a later loss does.
    feed(store, items_of([k.xid(1, 79, T0 + s(5 * 60))]))
    (same,) = store_reads.incidents(store)
    assert same["incident_id"] == after["incident_id"] and same["count"] == 2


def test_nvml_report_first_then_kernel_line_is_one_event_with_the_kernel_details(store: Store) -> None:
    k = Kmsg("n9")
    feed(store, items_of([inventory("n9", T0), processes("n9", T0, {77: 2}), nvml_xid("n9", 2, 13, T0 + s(5), 1)]))
    feed(store, items_of([k.xid(2, 13, T0 + s(5.5), 77, "trainer")]))
    (event,) = store_reads.fault_events(store)
    assert event["sources"] == "kernel+nvml" and event["raw"].startswith("NVRM: Xid")
    assert (event["pid"], event["process"], event["nvml_record_id"]) == (77, "trainer", "nvml:n9:1")
    (inc,) = store_reads.incidents(store)
    assert inc["count"] == 1 and inc["processes"] == ["trainer[77]"]


def test_migrations_build_exactly_the_declared_tables(store: Store) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from history.schema import metadata
    from history.tables import POSTGRESQL_ONLY_INDEXES

    def ours(name: str | None, type_: str, _parent: object) -> bool:
        if type_ == "index":
            return name not in POSTGRESQL_ONLY_INDEXES
        return type_ != "table" or name in metadata.tables

    store.create_schema()  # a second upgrade is a no-op
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_name": ours})
        diff = compare_metadata(ctx, metadata)
    assert diff == []


def test_evidence_that_arrives_before_its_fault_is_linked_later(store: Store) -> None:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from history.tables import EvidenceRecord, FaultEvent
    from models.node_records import Evidence

    line = Kmsg("n11").xid(0, 79, T0)
    ev = Evidence(node="n11", record_id="ev-early", trigger_record_id=line.record_id, xid=79)
    feed(store, items_of([ev]))
    feed(store, items_of([inventory("n11", T0), line]))
    with Session(store.engine) as sess:
        event = sess.scalars(select(FaultEvent)).one()
        assert sess.scalars(select(EvidenceRecord)).one().fault_event_id == event.id


def test_one_kernel_record_read_from_kmsg_kern_log_and_syslog_is_one_fault(store: Store) -> None:
    """One Xid 94 record as the agent reads it from /dev/kmsg (bare message, the header's stamp), from
    kern.log and from syslog (rsyslog writes the record to both): one contained ECC error, whichever copy
    comes first and in whichever batch; another boot's record with the same stamp and text is its own."""
    xid = "NVRM: Xid (PCI:0000:18:00): 94, pid=4242, name=python3, Contained: SM (0x1). RST: No, D-RST: No"

    def line(record_id: str, source: str, message: str, **kw: object) -> KernelLine:
        return KernelLine(node="n1", record_id=record_id, source=source, message=message, fault=True,
                          observed_at=T0 + s(20), emitted_at=T0 + s(20), **kw)  # type: ignore[arg-type]

    kern_log = line("file:/var/log/kern.log:8812", "file", f"Nov 29 12:00:10 n1 kernel: [11123.000000] {xid}")
    syslog = line("file:/var/log/syslog:90211", "file", f"Nov 29 12:00:10 n1 kernel: [11123.000000] {xid}")
    kmsg = line("kmsg:b0:5001", "kmsg", xid, boot_id="b0", seq=5001, monotonic_us=11_123_000_000)
    first = feed(store, items_of([inventory("n1", T0), kmsg, kern_log]))[0]
    assert (first.faults, first.duplicates) == (1, 1)
    later = store.process(items_of([syslog]))  # a later batch: the stored copy is found in the database
    assert (later.faults, later.duplicates) == (0, 1)
    other_boot = line("kmsg:b1:5001", "kmsg", xid, boot_id="b1", seq=5001, monotonic_us=11_123_000_000)
    assert store.process(items_of([other_boot])).faults == 1
    events = store_reads.fault_events(store)
    assert [(e["record_id"], e["boot_id"]) for e in events] == [("kmsg:b0:5001", "b0"), ("kmsg:b1:5001", "b1")]
    assert events[0]["record_key"] == events[1]["record_key"]


def test_a_double_bit_error_that_kills_a_job_is_one_hardware_incident_and_the_job_is_affected(store: Store) -> None:
    """Issue #23: Xid 48, then 63 and 95, the driver's Xid 45 for the process the DBE killed and its Xid 154:
    one hardware incident (one occurrence), the job listed as affected; no workload incident, no ticket or
    message of its own. Its later crash, on its own, is its own again."""
    k = Kmsg("n1")
    records: list[NodeRecord] = [
        inventory("n1", T0), pods("n1", T0 + s(1), {0: ("team-vision", "trainer-9", "trainer")}),
        k.xid(0, 48, T0 + s(10), text="An uncorrectable double bit error (DBE) has been detected on GPU."),
        k.xid(0, 63, T0 + s(11), text="Row Remapper: New row (0x00bf12a0) was marked for remapping."),
        k.xid(0, 95, T0 + s(11.2), 4242, "trainer", text="Uncontained: FBHUB. RST: Yes, D-RST: No"),
    ]
    feed(store, items_of(records))
    # The job's Xid 45 and the recovery action in a later batch: the hardware incident is read from the database.
    later = feed(store, items_of([k.xid(0, 45, T0 + s(12), 4242, "trainer", text="Ch 00000010"),
                                  k.line(f"NVRM: Xid (PCI:{pci(0)[:-2]}): 154, GPU recovery action changed from 0x0 "
                                         "(None) to 0x4 (Drain and Reset)", T0 + s(12.5))]))[0]
    (inc,) = store_reads.incidents(store)
    assert (inc["component"], inc["family"], inc["category"], inc["count"]) == ("gpu", "memory", "hardware", 1)
    assert inc["codes"] == ["Xid 48", "Xid 63", "Xid 95", "Xid 45", "Xid 154"]
    assert inc["affected"] == ["team-vision/trainer-9/trainer"]
    assert inc["recovery_action"] == "DRAIN_AND_RESET" and inc["immediate_action"] == "WORKFLOW_XID_48"
    assert inc["occurrence_pids"] == [4242]
    events = store_reads.fault_events(store)
    assert [(e["code"], e["counted"], e["sympathetic"]) for e in events] == [
        ("Xid 48", True, False), ("Xid 63", False, False), ("Xid 95", False, False), ("Xid 45", False, True),
        ("Xid 154", False, False)]
    assert not [o for o in later.outgoing if o.payload.get("operation") in ("create", "opened")]
    crash = feed(store, items_of([k.xid(0, 13, T0 + s(900), 4242, "trainer", text="Graphics SM Warp Exception")]))[0]
    assert crash.faults == 1
    own = [i for i in store_reads.incidents(store) if i["component"] == "workload"]
    assert [i["component_id"] for i in own] == ["team-vision/trainer/trainer"]


def test_a_root_port_s_aer_report_joins_the_lost_gpu_below_it(store: Store) -> None:
    """The agent's inventory names each GPU's upstream bridges: the root port's AER report (which names no
    device) is the GPU's below the port, one lost GPU with its Xid 79; before any inventory knows the port it
    would be a node-level PCIe incident (tests/models/test_port_reports.py)."""
    k = Kmsg("n1")
    inv = inventory("n1", T0)
    gpus = tuple(g.model_copy(update={"upstream_bridges": (f"0000:{0x10 + i:02x}:01.0",)})
                 for i, g in enumerate(inv.gpus))
    port = "0000:11:01.0"  # GPU 1's root port
    records: list[NodeRecord] = [
        inv.model_copy(update={"gpus": gpus}),
        k.line(f"pcieport {port}: AER: Uncorrected (Fatal) error received: {port}", T0 + s(10)),
        k.line(f"pcieport {port}: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
               "(Requester ID)", T0 + s(10)),
        k.line(f"pcieport {port}:   device [8086:6f08] error status/mask=00004020/00000000", T0 + s(10)),
        k.xid(1, 79, T0 + s(10.5), text="GPU has fallen off the bus."),
    ]
    feed(store, items_of(records))
    (inc,) = store_reads.incidents(store)
    assert (inc["component"], inc["gpu_uuid"], inc["family"], inc["count"]) == ("gpu", uuid("n1", 1), "gpu_lost", 1)
    assert inc["codes"] == ["AER", "Xid 79"]
