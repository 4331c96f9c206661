"""The fleet reliability figures from the history: hardware incidents only, merged ones left out, and
each node in the pool the history last recorded for it (a remediation loop's, a cordon decision's or
a breaker trip's action record)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from history.action_tables import actions_table
from history.engine import make_engine
from history.migrate import upgrade
from history.reliability import incident_spans, node_pools, reliability
from history.remediation_store import LoopRow, RemediationStore
from history.stats import stats
from history.tables import Incident
from respond.cordon.action_log import ActionRecord, SqlActionStore

T = datetime(2026, 12, 1, 12, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = make_engine(f"sqlite:///{tmp_path / 'h.db'}")
    upgrade(eng)
    yield eng
    eng.dispose()


def incident(n: int, node: str, start_h: float, resolved_h: float | None, *, component: str = "gpu",
             category: str = "hardware", serial: str | None = "A", merged_into: str | None = None) -> Incident:
    start = T + timedelta(hours=start_h)
    return Incident(incident_id=f"inc-{n}", fingerprint=f"f{n}", node=node, gpu="GPU-1", family="gpu_lost",
                    status="open" if resolved_h is None else "resolved", category=category, reason="r", count=1,
                    first_seen=start, last_seen=start, opened_at=start, updated_at=start,
                    resolved_at=None if resolved_h is None else T + timedelta(hours=resolved_h),
                    gpu_uuid=f"GPU-{node}" if component == "gpu" else None, serial=serial, codes=[], pods=[],
                    processes=[], workloads=[], component=component, merged_into=merged_into)


def loop(loop_id: str, node: str, pool: str, at: datetime) -> LoopRow:
    return LoopRow(loop_id=loop_id, incident_id=f"inc-{loop_id}", node=node, gpu="GPU-1", card="serial:A", pool=pool,
                   family="gpu_lost", cordoned_at=at.isoformat(), stage="queued", reason="opened", opened_at=at,
                   stage_since=at, updated_at=at, deadline_at=at + timedelta(hours=4), details={})


def test_hardware_incidents_in_their_nodes_recorded_pools(engine: Engine) -> None:
    with Session(engine) as s:
        s.add_all([
            incident(0, "n1", 0, 2), incident(1, "n1", 5, None), incident(2, "n2", 1, 4, serial=None),
            incident(3, "n3", 2, 3, component="node", serial=None),
            incident(4, "n1", 3, 3.5, category="application"),  # an application's fault: no reliability figure
            incident(5, "n1", 4, 4.5, merged_into="inc-1"),  # counted in the incident that absorbed it
            incident(6, "fleet", 4, 5, component="fleet"),
        ])
        s.commit()
    store = RemediationStore(engine)
    store.open(loop("l1", "n1", "old-pool", T))
    store.open(loop("l2", "n1", "train", T + timedelta(hours=1)))  # the later record wins
    with engine.begin() as conn:
        conn.execute(actions_table.insert().values(at=T, action="breaker_trip", outcome="done", node="n2",
                                                   reason="r", dry_run=False, actor="xidpipe",
                                                   details={"pool": "train", "family": "gpu_lost"}))
    # A cordon decision's record (a not_needed one too) carries the pool the responder read.
    SqlActionStore(engine).record(ActionRecord(at=T, action="cordon", outcome="noop", node="n3", decision="not_needed",
                                               details={"pool": "infer"}))
    SqlActionStore(engine).record(ActionRecord(at=T, action="release", outcome="done", node="n4"))
    with Session(engine) as s:
        spans = incident_spans(s)
        assert sorted((sp.node, sp.card) for sp in spans) == [
            ("n1", "serial:A"), ("n1", "serial:A"), ("n2", "uuid:GPU-n2"), ("n3", None)]
        assert node_pools(s) == {"n1": "train", "n2": "train", "n3": "infer"}
        got = reliability(s)
        assert got["by_pool"]["train"] == {"incidents": 3, "resolved": 2, "mean_time_to_resolve_s": 2.5 * 3600,
                                           "mean_time_between_incidents_s": 2.5 * 3600}
        assert set(got["by_pool"]) == {"train", "infer"} and got["by_pool"]["infer"]["incidents"] == 1
        assert got["by_node"]["n1"]["mean_time_between_incidents_s"] == 5 * 3600
        assert got["by_card"]["serial:A"]["mean_time_to_resolve_s"] == 2 * 3600
        # Since a time: only the incidents that began at or after it.
        assert reliability(s, T + timedelta(hours=2))["all"]["incidents"] == 2
        assert stats(s)["reliability"] == got
