"""The worker's reliability histograms, from the incidents its store tells: a hardware incident's time
to resolve when it resolves, and the time since its node's previous one began when the next opens."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from models.stream_policy import PipelinePolicy
from streams.items import ItemMapper
from streams.observe import WorkerObserver
from streams.settings import WorkerSettings
from streams.store import Store
from tests.streams.records import T0, Kmsg, inventory, pods, s


def samples(observer: WorkerObserver, name: str) -> dict[tuple[str, str], float]:
    """(sample name, node) → value of one histogram."""
    return {(smp.name, smp.labels.get("node", "")): smp.value
            for fam in text_string_to_metric_families(observer.metrics.render().decode()) if fam.name == name
            for smp in fam.samples if "le" not in smp.labels}


def test_time_to_resolve_and_between_a_nodes_hardware_incidents(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'r.db'}", PipelinePolicy(quiet_period_s=600))
    store.create_schema()
    observer = WorkerObserver(None, WorkerSettings())
    a, b = Kmsg("node-a"), Kmsg("node-b")
    mapper = ItemMapper()
    batches = [
        [inventory("node-a", T0), inventory("node-b", T0),
         pods("node-a", T0, {0: ("team-nlp", "bert-1", "main")}), b.xid(2, 79, T0 + s(30))],
        [b.xid(2, 79, T0 + s(7230))],  # two hours later: the first resolved (quiet 10 min), a new one opens
        [b.xid(3, 48, T0 + s(14430)), a.xid(0, 13, T0 + s(14440), 11, "bert")],  # another GPU; an app's fault
    ]
    for records in batches:
        observer.stored(store.process([it for r in records for it in mapper.items(r, "topic")] + mapper.flush_all()))
    resolve = samples(observer, "xidpipe_worker_incident_time_to_resolve_by_node_seconds")
    between = samples(observer, "xidpipe_worker_incident_time_between_by_node_seconds")
    # Two incidents of node-b resolved, each 10 minutes (the quiet period) after its first fault.
    assert resolve == {("xidpipe_worker_incident_time_to_resolve_by_node_seconds_count", "node-b"): 2.0,
                       ("xidpipe_worker_incident_time_to_resolve_by_node_seconds_sum", "node-b"): 1200.0}
    # node-b's incidents began at 0:00:30, 2:00:30 and 4:00:30; node-a's application fault counts nowhere.
    assert between == {("xidpipe_worker_incident_time_between_by_node_seconds_count", "node-b"): 2.0,
                       ("xidpipe_worker_incident_time_between_by_node_seconds_sum", "node-b"): 14400.0}
    # The distributions fleet-wide, with no node label: the same counts, 10 minutes in the 15-minute bucket.
    fleet = {(smp.name, smp.labels.get("le", "")): smp.value
             for fam in text_string_to_metric_families(observer.metrics.render().decode())
             if fam.name in ("xidpipe_worker_incident_time_to_resolve_seconds",
                             "xidpipe_worker_incident_time_between_seconds") for smp in fam.samples
             if "node" not in smp.labels}
    assert fleet[("xidpipe_worker_incident_time_to_resolve_seconds_count", "")] == 2.0
    assert fleet[("xidpipe_worker_incident_time_between_seconds_sum", "")] == 14400.0
    assert fleet[("xidpipe_worker_incident_time_to_resolve_seconds_bucket", "+Inf")] == 2.0
    store.dispose()
