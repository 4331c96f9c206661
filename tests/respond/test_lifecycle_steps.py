"""The responder records `mitigated` when it really cordoned a node and `ticketed` when the incident
has a ticket; once each, whatever is redelivered; never for a dry-run cordon."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.queries import incident_transitions
from history.tables import Incident, IncidentTransition
from models.cordon_policy import CordonPolicy
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import ActionResult, Decided
from respond.cordon.runtime import build_executor
from respond.cordon.settings import ActionSettings
from respond.responder import Responder
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from streams.store import Store

T = datetime(2026, 11, 25, 15, 26, 51, tzinfo=UTC)


def incident(incident_id: str, category: str = "hardware") -> Incident:
    return Incident(
        incident_id=incident_id, fingerprint=f"v1:{incident_id}", node="gpu-node-03", gpu="0000:63:00.0",
        family="gpu_lost", status="open", category=category, reason="Xid 79", count=1, first_seen=T, last_seen=T,
        opened_at=T, updated_at=T, resolved_at=None, previous_incident_id=None, gpu_uuid="GPU-1", serial="165",
        pci="0000:63:00.0", codes=["Xid 79"], pods=[], processes=[], workloads=[], immediate_action=None,
        investigatory_action=None, description=None, cordon_requested=True, version=1,
    )


class CordoningExecutor:
    """Stands in for an executor with a cluster: every request cordons the node."""

    def __init__(self, path: Path) -> None:
        self.store = JsonlActionStore(path)
        self.policy = CordonPolicy()

    def decide(self, req: Any) -> Decided:
        return Decided(req, ActionResult(action="cordon", outcome="done", node=req.node, incident_id=req.incident_id,
                                         decision="cordon", reason="Xid 79: cordon at once",
                                         changes=["cordon", "taint"]))

    def complete(self, decided: Decided) -> ActionResult:
        return decided.result


def setup(tmp_path: Path) -> tuple[str, Any]:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = Store(url)
    store.create_schema()
    with Session(store.engine) as s:
        s.add_all([incident("inc-1"), incident("inc-2")])
        s.commit()
    sinks = build_sinks(SinkSettings(outbox_dir=tmp_path / "outbox", group_wait_s=0), url)
    return url, sinks


def steps(url: str, incident_id: str) -> list[tuple[str, str, str]]:
    engine = sa.create_engine(url)
    with Session(engine) as s:
        out = [(t["from"], t["to"], t["actor"]) for t in incident_transitions(s, incident_id)]
    engine.dispose()
    return out


def test_cordon_and_ticket_are_recorded_once(tmp_path: Path) -> None:
    url, sinks = setup(tmp_path)
    executor: Any = CordoningExecutor(tmp_path / "actions.jsonl")
    responder = Responder(sa.create_engine(url), executor, sinks)

    async def go() -> None:
        for kind in ("cordon_candidate", "cordon_candidate", "ticket", "ticket"):
            await responder.handle({"kind": kind, "incident_id": "inc-1"})

    asyncio.run(go())
    assert steps(url, "inc-1") == [("open", "mitigated", "xidpipe-respond"),
                                   ("mitigated", "ticketed", "xidpipe-respond")]
    engine = sa.create_engine(url)
    with Session(engine) as s:
        row = s.get(Incident, "inc-1")
        assert row is not None and row.lifecycle == "ticketed" and row.status == "open"
        assert (row.version, row.updated_at) == (1, T)  # the stream's own: its quiet period counts from there
        reasons = [t.reason for t in s.scalars(sa.select(IncidentTransition))]
    engine.dispose()
    assert reasons[0].startswith("node gpu-node-03 cordoned") and reasons[1].startswith("ticket ")


def test_a_dry_run_cordon_is_not_a_mitigation(tmp_path: Path) -> None:
    url, sinks = setup(tmp_path)
    executor = build_executor(ActionSettings(action_log=tmp_path / "actions.jsonl"))  # no cluster: dry run
    responder = Responder(sa.create_engine(url), executor, sinks)

    async def go() -> None:
        await responder.handle({"kind": "cordon_candidate", "incident_id": "inc-2"})
        assert steps(url, "inc-2") == []  # the cordon lane waits on no ticket
        for incident_id in responder.take_ticket_refreshes():
            await responder.refresh_ticket(incident_id)

    asyncio.run(go())
    # The cordon asks the ticket lane to offer the ticket sink a refreshed dossier: that creates the ticket.
    assert steps(url, "inc-2") == [("open", "ticketed", "xidpipe-respond")]
    assert responder.record_ticketed("inc-2") is False  # already recorded


def test_the_ticket_retry_loop_records_ticketed(tmp_path: Path) -> None:
    url, sinks = setup(tmp_path)
    executor = build_executor(ActionSettings(action_log=tmp_path / "actions.jsonl"))
    responder = Responder(sa.create_engine(url), executor, sinks)
    notice = responder._notice("inc-1")
    assert notice is not None
    sinks.tickets.enqueue(notice)  # left pending while the tracker was down

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(responder.drain_tickets(stop, interval_s=0.05))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not steps(url, "inc-1") and loop.time() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        await task

    asyncio.run(go())
    assert steps(url, "inc-1") == [("open", "ticketed", "xidpipe-respond")]


class RecordingExecutor(CordoningExecutor):
    """Cordons every node, and remembers the order of the decisions and completions."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: list[tuple[str, str]] = []

    def decide(self, req: Any) -> Decided:
        self.calls.append(("decide", req.incident_id))
        return super().decide(req)

    def complete(self, decided: Decided) -> ActionResult:
        self.calls.append(("complete", decided.req.incident_id))
        return super().complete(decided)


def test_a_fetch_of_cordons_is_decided_whole_before_any_is_completed(tmp_path: Path) -> None:
    """Of a burst of cordon candidates, every node is decided (and written) before any plan's
    condition, Event or drain runs; an unknown incident is answered as such, the others go on."""
    url, sinks = setup(tmp_path)
    executor: Any = RecordingExecutor(tmp_path / "actions.jsonl")
    responder = Responder(sa.create_engine(url), executor, sinks)
    messages = [{"kind": "cordon_candidate", "incident_id": i} for i in ("inc-1", "inc-9", "inc-2")]
    results = asyncio.run(responder.handle_cordons([*messages, {"kind": "ticket", "incident_id": "inc-1"}]))
    assert executor.calls == [("decide", "inc-1"), ("decide", "inc-2"), ("complete", "inc-1"), ("complete", "inc-2")]
    assert [type(r).__name__ for r in results] == ["HandlingResult", "LookupError", "HandlingResult", "ValueError"]
    assert all(r.result == "done" for r in results if not isinstance(r, Exception))
    assert steps(url, "inc-2") == [("open", "mitigated", "xidpipe-respond")]
