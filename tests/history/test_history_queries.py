"""The history queries give the same answers on SQLite and PostgreSQL (where the owner filter may go
through a trigram index and event filters are counted in the fault events' indexes)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from history.ledger_store import rebuild_ledger
from history.queries import (
    GpuFilter,
    IncidentFilter,
    TransitionError,
    gpu_history,
    heatmap,
    list_gpus,
    list_incidents,
    stats,
    transition_incident,
)
from models.stream_policy import PipelinePolicy
from streams.items import ItemMapper
from streams.store import Store
from tests.streams.records import T0, Kmsg, inventory, pods, s, serial


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = (f"sqlite:///{tmp_path / 'q.db'}" if request.param == "sqlite"
           else request.getfixturevalue("postgres_database"))
    st = Store(url, PipelinePolicy())
    st.create_schema()
    a, b = Kmsg("node-a"), Kmsg("node-b")
    records = [
        inventory("node-a", T0), inventory("node-b", T0),
        pods("node-a", T0, {0: ("team-nlp", "bert-1", "main"), 1: ("team-cv", "resnet_x-1", "main")}),
        a.xid(0, 13, T0 + s(10), 11, "bert"), a.xid(0, 43, T0 + s(11), 11, "bert"),
        a.xid(1, 31, T0 + s(20), 12, "resnet"),
        b.xid(2, 79, T0 + s(30)),
    ]
    mapper = ItemMapper()
    st.process([it for r in records for it in mapper.items(r, "topic")] + mapper.flush_all())
    with Session(st.engine) as ses, ses.begin():
        rebuild_ledger(ses)
    yield st
    st.dispose()


def nodes(st: Store, f: IncidentFilter) -> tuple[list[str], int]:
    with Session(st.engine) as ses:
        rows, total = list_incidents(ses, f)
        return sorted(r.node for r in rows), total


def test_incident_filters(store: Store) -> None:
    assert nodes(store, IncidentFilter()) == (["node-a", "node-a", "node-b"], 3)
    assert nodes(store, IncidentFilter(xid=43)) == (["node-a"], 1)  # counted from the events alone
    assert nodes(store, IncidentFilter(xid=43, node="node-b")) == ([], 0)
    assert nodes(store, IncidentFilter(xid=79, namespace="team-nlp")) == ([], 0)
    assert nodes(store, IncidentFilter(namespace="team-cv")) == (["node-a"], 1)
    assert nodes(store, IncidentFilter(owner="bert")) == (["node-a"], 1)
    assert nodes(store, IncidentFilter(owner="resnet_x")) == (["node-a"], 1)  # LIKE wildcards are literal
    assert nodes(store, IncidentFilter(owner="resnet%")) == ([], 0)
    assert nodes(store, IncidentFilter(since=T0 + s(25), until=T0 + s(40))) == (["node-b"], 1)
    assert nodes(store, IncidentFilter(lifecycle="open")) == (["node-a", "node-a", "node-b"], 3)
    assert nodes(store, IncidentFilter(gpu=serial("node-b", 2))) == (["node-b"], 1)


def test_transition_gpus_stats_heatmap(store: Store) -> None:
    with Session(store.engine) as ses:
        (inc,), _ = list_incidents(ses, IncidentFilter(node="node-b"))
        step = transition_incident(ses, inc.incident_id, "repaired", actor="bob", reason="reseated")
        ses.commit()
        assert (step["from"], step["to"]) == ("open", "repaired")
        with pytest.raises(TransitionError, match="repaired → returned is not allowed"):
            transition_incident(ses, inc.incident_id, "returned", actor="bob", reason="x")
        with pytest.raises(LookupError):
            transition_incident(ses, "v1:nothing", "closed", actor="bob", reason="x")
        assert nodes(store, IncidentFilter(lifecycle="repaired")) == (["node-b"], 1)
        rows, total = list_gpus(ses, GpuFilter(node="node-b"), limit=2, offset=1)
        assert total == 4 and [r["pci_slot"] for r in rows] == ["0000:38:00.0", "0000:58:00.0"]
        history = gpu_history(ses, serial("node-b", 2))
        assert history is not None and [i["lifecycle"] for i in history["incidents"]] == ["repaired"]
        data = stats(ses)
        assert data["incidents"]["by_gpu_model"] == {"NVIDIA H100 80GB HBM3": 3}
        assert data["gpu_rates"]["gpus_from"] == "ledger"
        hm = heatmap(ses, T0 - timedelta(hours=12), T0 + timedelta(hours=12))  # one UTC day
        assert hm["days"] == ["2026-11-29"] and hm["nodes"] == [{"node": "node-b", "counts": [1], "total": 1}]


@pytest.mark.parametrize("sort", ["last_seen", "first_seen", "count"])
def test_a_page_cut_from_the_keys_equals_the_ordered_query(store: Store, sort: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import history.queries as q

    def pages(f: IncidentFilter) -> list[tuple[list[str], int]]:
        with Session(store.engine) as ses:
            out = []
            for offset in range(4):
                rows, total = list_incidents(ses, f, sort=sort, limit=2, offset=offset)  # type: ignore[arg-type]
                out.append(([r.incident_id for r in rows], total))
            return out

    filters = [IncidentFilter(owner="team-"), IncidentFilter(lifecycle="open"), IncidentFilter(node="node-a"),
               IncidentFilter(since=T0)]
    few = [pages(f) for f in filters]
    monkeypatch.setattr(q, "_FEW_MATCHES", -1)  # always the ordered query
    assert [pages(f) for f in filters] == few
    assert [p[0][1] for p in few] == [2, 3, 2, 3]  # every filter spans pages of 2
    assert few[1][0][1] == 3 and len(few[1][0][0]) == 2 and few[1][3] == ([], 3)
