"""The remediation loops in SQL (`history.remediation_tables`): the responder's persisted state
machine, and what the CLI, the API and the pages read and an operator changes (pause, resume, cancel).

Every change of a loop is a compare-and-set on its `version`: a transition (a new stage) writes its
`remediation_transitions` row in the same transaction, and an attempt (a Job or a hand-off) is
reserved in the same transaction as the stage or counter that leads to it. Two responders (or a
responder and its restarted self) that decide the same transition write it once; the other's
write finds the version moved and reads the loop again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from history.remediation_tables import (
    gpu_rma_table,
    remediation_attempts_table,
    remediation_loops_table,
    remediation_transitions_table,
)
from history.tables import Incident
from models.ledger import card_key
from models.remediation import Attempt
from models.vocabulary import FINAL_STAGES, RemediationStage

loops_t, attempts_t, transitions_t = remediation_loops_table, remediation_attempts_table, remediation_transitions_table
FINAL = tuple(str(s) for s in FINAL_STAGES)
REMEDIES = ("reset_gpu", "reboot_node")
REASON_MAX = 4000


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class LoopRow:
    loop_id: str
    incident_id: str
    node: str
    gpu: str
    card: str
    pool: str
    family: str
    cordoned_at: str
    stage: str
    reason: str
    opened_at: datetime
    stage_since: datetime
    updated_at: datetime
    deadline_at: datetime
    remedy: str | None = None
    via: str | None = None
    attempt: int = 0
    validation: int = 0
    dry_run: bool = False
    paused: bool = False
    paused_by: str | None = None
    cancel_requested: str | None = None
    version: int = 1
    boot_id: str | None = None
    closed_at: datetime | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.stage in FINAL


@dataclass(frozen=True, slots=True)
class AttemptRow:
    loop_id: str
    kind: str
    seq: int
    via: str
    job_name: str
    incident_id: str
    node: str
    card: str
    family: str
    outcome: str
    reason: str
    reserved_at: datetime
    validated: str | None = None
    finished_at: datetime | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_attempt(self) -> Attempt:
        return Attempt(loop_id=self.loop_id, incident_id=self.incident_id, node=self.node, card=self.card,
                       family=self.family, remedy=self.kind, outcome=self.outcome,  # type: ignore[arg-type]
                       validated=self.validated, at=self.reserved_at)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class TransitionRow:
    id: int
    loop_id: str
    seq: int
    incident_id: str
    node: str
    from_stage: str | None
    to_stage: str
    at: datetime
    actor: str
    reason: str
    dry_run: bool
    told_at: datetime | None = None


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _loop(row: sa.RowMapping) -> LoopRow:
    return LoopRow(**{k: row[k] for k in LoopRow.__dataclass_fields__})


def _attempt(row: sa.RowMapping) -> AttemptRow:
    return AttemptRow(**{k: row[k] for k in AttemptRow.__dataclass_fields__})


def _transition(row: sa.RowMapping) -> TransitionRow:
    return TransitionRow(**{k: row[k] for k in TransitionRow.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class Reservation:
    """An attempt to reserve with a loop's change: a Job or hand-off of `kind`, its `seq`, its name."""

    kind: str
    seq: int
    via: str
    job_name: str
    details: dict[str, Any] = field(default_factory=dict)


class RemediationStore:
    """The loops, attempts, transitions and RMAs behind `engine`, migrated to head."""

    def __init__(self, engine: sa.Engine, actor: str = "xidpipe-remediation") -> None:
        self.engine = engine
        self.actor = actor

    # --- loops ------------------------------------------------------------------------------------

    def open(self, loop: LoopRow) -> tuple[LoopRow, bool]:
        """Insert the loop with its first transition; (the loop as stored, whether it was new now)."""
        values = {k: getattr(loop, k) for k in LoopRow.__dataclass_fields__}
        values["reason"] = loop.reason[:REASON_MAX]
        try:
            with self.engine.begin() as conn:
                conn.execute(loops_t.insert().values(**values))
                conn.execute(transitions_t.insert().values(
                    loop_id=loop.loop_id, seq=loop.version, incident_id=loop.incident_id, node=loop.node,
                    from_stage=None, to_stage=loop.stage, at=loop.opened_at, actor=self.actor,
                    reason=values["reason"], dry_run=loop.dry_run))
        except IntegrityError:
            found = self.get(loop.loop_id)
            assert found is not None
            return found, False
        return loop, True

    def get(self, loop_id: str) -> LoopRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(loops_t).where(loops_t.c.loop_id == loop_id)).mappings().first()
        return None if row is None else _loop(row)

    def find(self, prefix: str) -> LoopRow | None:
        """The loop whose id starts with `prefix`, or the latest loop of the incident or node so named."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(loops_t).where(sa.or_(
                loops_t.c.loop_id.startswith(prefix, autoescape=True), loops_t.c.incident_id == prefix,
                loops_t.c.node == prefix)).order_by(loops_t.c.opened_at.desc()).limit(2)).mappings().all()
        by_id = [r for r in rows if str(r["loop_id"]).startswith(prefix)]
        if len(by_id) > 1:
            return None
        return _loop(rows[0]) if rows else None

    def loops(self, *, active: bool | None = None, node: str | None = None, incident_id: str | None = None,
             limit: int = 100) -> list[LoopRow]:
        q = sa.select(loops_t).order_by(loops_t.c.opened_at.desc()).limit(limit)
        if active is True:
            q = q.where(loops_t.c.stage.not_in(FINAL))
        elif active is False:
            q = q.where(loops_t.c.stage.in_(FINAL))
        if node:
            q = q.where(loops_t.c.node == node)
        if incident_id:
            q = q.where(loops_t.c.incident_id == incident_id)
        with self.engine.connect() as conn:
            return [_loop(r) for r in conn.execute(q).mappings()]

    def due(self, limit: int = 1000) -> list[LoopRow]:
        """The loops to advance: not final, not paused, oldest first."""
        q = (sa.select(loops_t).where(loops_t.c.stage.not_in(FINAL), loops_t.c.paused.is_(False))
             .order_by(loops_t.c.opened_at).limit(limit))
        with self.engine.connect() as conn:
            return [_loop(r) for r in conn.execute(q).mappings()]

    def in_flight(self, pool: str | None = None) -> int:
        """Loops past the queue and not final (the cap's count), in `pool` when given."""
        q = sa.select(sa.func.count()).select_from(loops_t).where(
            loops_t.c.stage.not_in((*FINAL, str(RemediationStage.QUEUED))), loops_t.c.dry_run.is_(False))
        if pool is not None:
            q = q.where(loops_t.c.pool == pool)
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar_one())

    def stage_counts(self) -> dict[str, int]:
        q = sa.select(loops_t.c.stage, sa.func.count()).where(loops_t.c.stage.not_in(FINAL)).group_by(loops_t.c.stage)
        with self.engine.connect() as conn:
            return {str(s): int(n) for s, n in conn.execute(q)}

    def change(self, loop: LoopRow, *, stage: str | None = None, reason: str | None = None, at: datetime | None = None,
               reserve: Reservation | None = None, actor: str | None = None, **updates: Any) -> LoopRow | None:
        """Compare-and-set the loop at its version: a new stage (with its transition row), new fields, an
        attempt reserved in the same transaction. None when the loop moved since it was read."""
        at = at or _now()
        values: dict[str, Any] = {**updates, "version": loop.version + 1, "updated_at": at}
        if reason is not None:
            values["reason"] = reason[:REASON_MAX]
        moving = stage is not None and stage != loop.stage
        if moving:
            values["stage"], values["stage_since"] = stage, at
            if stage in FINAL:
                values["closed_at"] = at
        try:
            with self.engine.begin() as conn:
                done = conn.execute(loops_t.update().where(loops_t.c.loop_id == loop.loop_id,
                                                           loops_t.c.version == loop.version).values(**values))
                if done.rowcount != 1:
                    return None
                if moving:
                    conn.execute(transitions_t.insert().values(
                        loop_id=loop.loop_id, seq=loop.version + 1, incident_id=loop.incident_id, node=loop.node,
                        from_stage=loop.stage, to_stage=stage, at=at, actor=actor or self.actor,
                        reason=(reason or loop.reason)[:REASON_MAX], dry_run=loop.dry_run))
                if reserve is not None:
                    conn.execute(attempts_t.insert().values(
                        loop_id=loop.loop_id, kind=reserve.kind, seq=reserve.seq, via=reserve.via,
                        job_name=reserve.job_name, incident_id=loop.incident_id, node=loop.node, card=loop.card,
                        family=loop.family, outcome="in_flight", validated=None, reason="reserved", reserved_at=at,
                        finished_at=None, details=reserve.details))
        except IntegrityError:
            return None
        return replace(loop, **{k: v for k, v in values.items() if k in LoopRow.__dataclass_fields__})

    def request(self, loop_id: str, *, paused: bool | None = None, by: str,
                cancel: str | None = None) -> LoopRow | None:
        """An operator's pause, resume or cancel, recorded on the loop (the responder acts on it)."""
        for _ in range(5):
            loop = self.get(loop_id)
            if loop is None or loop.final:
                return loop
            updates: dict[str, Any] = {}
            if paused is not None:
                updates["paused"], updates["paused_by"] = paused, by if paused else None
            if cancel is not None:
                updates["cancel_requested"] = f"cancelled by {by}: {cancel}"[:REASON_MAX]
                updates["paused"] = False
            changed = self.change(loop, **updates)
            if changed is not None:
                return changed
        raise RuntimeError(f"remediation loop {loop_id} kept changing")

    # --- attempts ---------------------------------------------------------------------------------

    def attempt(self, loop_id: str, kind: str, seq: int) -> AttemptRow | None:
        q = sa.select(attempts_t).where(attempts_t.c.loop_id == loop_id, attempts_t.c.kind == kind,
                                        attempts_t.c.seq == seq)
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return None if row is None else _attempt(row)

    def attempts(self, loop_id: str) -> list[AttemptRow]:
        q = sa.select(attempts_t).where(attempts_t.c.loop_id == loop_id).order_by(attempts_t.c.id)
        with self.engine.connect() as conn:
            return [_attempt(r) for r in conn.execute(q).mappings()]

    def finish(self, loop_id: str, kind: str, seq: int, outcome: str, reason: str, *, at: datetime | None = None,
               validated: str | None = None, details: dict[str, Any] | None = None) -> None:
        """An attempt's outcome (written once: an attempt already finished keeps its first outcome)."""
        values: dict[str, Any] = {"outcome": outcome, "reason": reason[:REASON_MAX], "finished_at": at or _now()}
        if validated is not None:
            values["validated"] = validated
        if details is not None:
            values["details"] = details
        with self.engine.begin() as conn:
            conn.execute(attempts_t.update().where(
                attempts_t.c.loop_id == loop_id, attempts_t.c.kind == kind, attempts_t.c.seq == seq,
                attempts_t.c.outcome == "in_flight").values(**values))

    def validated(self, loop_id: str, kind: str, seq: int, verdict: str) -> None:
        """What validation said of a reset or reboot."""
        with self.engine.begin() as conn:
            conn.execute(attempts_t.update().where(attempts_t.c.loop_id == loop_id, attempts_t.c.kind == kind,
                                                   attempts_t.c.seq == seq).values(validated=verdict))

    def history(self, node: str, card: str, since: datetime) -> list[Attempt]:
        """The resets, reboots and hand-offs of `node` or `card` reserved since `since`, oldest first."""
        who = attempts_t.c.node == node if not card else sa.or_(attempts_t.c.node == node, attempts_t.c.card == card)
        q = (sa.select(attempts_t).where(who, attempts_t.c.kind.in_(REMEDIES), attempts_t.c.reserved_at >= since)
             .order_by(attempts_t.c.reserved_at, attempts_t.c.id))
        with self.engine.connect() as conn:
            return [_attempt(r).as_attempt() for r in conn.execute(q).mappings()]

    # --- transitions ------------------------------------------------------------------------------

    def transitions(self, loop_id: str | None = None, incident_id: str | None = None) -> list[TransitionRow]:
        q = sa.select(transitions_t).order_by(transitions_t.c.at, transitions_t.c.id)
        if loop_id:
            q = q.where(transitions_t.c.loop_id == loop_id)
        if incident_id:
            q = q.where(transitions_t.c.incident_id == incident_id)
        with self.engine.connect() as conn:
            return [_transition(r) for r in conn.execute(q).mappings()]

    def untold(self, limit: int = 100) -> list[TransitionRow]:
        q = sa.select(transitions_t).where(transitions_t.c.told_at.is_(None)).order_by(transitions_t.c.id).limit(limit)
        with self.engine.connect() as conn:
            return [_transition(r) for r in conn.execute(q).mappings()]

    def told(self, ids: Iterable[int], at: datetime | None = None) -> None:
        ids = list(ids)
        if ids:
            with self.engine.begin() as conn:
                conn.execute(transitions_t.update().where(transitions_t.c.id.in_(ids)).values(told_at=at or _now()))

    # --- reliability ------------------------------------------------------------------------------

    def repairs(self, since: datetime) -> list[tuple[str, str, datetime, datetime]]:
        """(node, card, the incident's first fault, returned) of the loops that returned a node since `since`."""
        q = (sa.select(loops_t.c.node, loops_t.c.card, Incident.first_seen, loops_t.c.closed_at)
             .join(Incident, Incident.incident_id == loops_t.c.incident_id)
             .where(loops_t.c.stage == str(RemediationStage.RETURNED), loops_t.c.closed_at >= since))
        with self.engine.connect() as conn:
            return [(str(n), str(c), _utc(f) or since, _utc(r) or since) for n, c, f, r in conn.execute(q)]

    def incident_starts(self, since: datetime) -> tuple[dict[str, list[datetime]], dict[str, list[datetime]]]:
        """When each node's and each card's incidents began since `since` (hardware ones: not applications or
        fleets), for the mean time between incidents."""
        q = (sa.select(Incident.node, Incident.serial, Incident.gpu_uuid, Incident.first_seen)
             .where(Incident.first_seen >= since, Incident.component.in_(("gpu", "nvswitch", "node")),
                    Incident.category != "application"))
        nodes: dict[str, list[datetime]] = {}
        cards: dict[str, list[datetime]] = {}
        with self.engine.connect() as conn:
            for node, serial, gpu_uuid, first in conn.execute(q):
                at = _utc(first) or since
                nodes.setdefault(str(node), []).append(at)
                if gpu_uuid:
                    cards.setdefault(card_key(serial, gpu_uuid), []).append(at)
        return nodes, cards

    # --- RMA --------------------------------------------------------------------------------------

    def open_rma(self, loop: LoopRow, pci_slot: str, reason: str, at: datetime | None = None) -> bool:
        """Mark the loop's card for RMA (once per loop); True when marked now."""
        try:
            with self.engine.begin() as conn:
                conn.execute(gpu_rma_table.insert().values(
                    card=loop.card or f"gpu:{loop.gpu}", node=loop.node, pci_slot=pci_slot,
                    gpu_uuid=loop.gpu if loop.gpu.startswith("GPU-") else None, incident_id=loop.incident_id,
                    loop_id=loop.loop_id, opened_at=at or _now(), reason=reason[:REASON_MAX]))
        except IntegrityError:
            return False
        return True

    def rmas(self, *, open_only: bool = False, card: str | None = None) -> list[dict[str, Any]]:
        q = sa.select(gpu_rma_table).order_by(gpu_rma_table.c.opened_at)
        if open_only:
            q = q.where(gpu_rma_table.c.closed_at.is_(None))
        if card:
            q = q.where(gpu_rma_table.c.card == card)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]


def _iso(value: datetime | None) -> str | None:
    at = _utc(value)
    return at.isoformat() if at is not None else None


def loop_dict(loop: LoopRow, attempts: Sequence[AttemptRow] = (), transitions: Sequence[TransitionRow] = (),
              now: datetime | None = None) -> dict[str, Any]:
    """A loop as the CLI, the API and the pages show it: its state, its attempts, its transitions."""
    now = now or _now()
    details = {k: v for k, v in loop.details.items() if k != "cluster_evidence"}
    return {
        "loop_id": loop.loop_id, "incident_id": loop.incident_id, "node": loop.node, "gpu": loop.gpu,
        "card": loop.card, "pool": loop.pool, "family": loop.family, "stage": loop.stage, "remedy": loop.remedy,
        "via": loop.via, "reason": loop.reason, "dry_run": loop.dry_run, "paused": loop.paused,
        "paused_by": loop.paused_by, "cancel_requested": loop.cancel_requested, "final": loop.final,
        "stuck": not loop.final and now > (_utc(loop.deadline_at) or now), "opened_at": _iso(loop.opened_at),
        "stage_since": _iso(loop.stage_since), "deadline_at": _iso(loop.deadline_at),
        "closed_at": _iso(loop.closed_at), "details": details,
        "attempts": [{"kind": a.kind, "seq": a.seq, "via": a.via, "job": a.job_name, "outcome": a.outcome,
                      "validated": a.validated, "reason": a.reason, "reserved_at": _iso(a.reserved_at),
                      "finished_at": _iso(a.finished_at)} for a in attempts],
        "transitions": [{"from": t.from_stage, "to": t.to_stage, "at": _iso(t.at), "actor": t.actor,
                         "reason": t.reason} for t in transitions],
    }


def describe(store: RemediationStore, loop: LoopRow) -> dict[str, Any]:
    return loop_dict(loop, store.attempts(loop.loop_id), store.transitions(loop.loop_id))


def incident_remediation(s: Session, incident_id: str) -> list[dict[str, Any]]:
    """The remediation loops of an incident, described (nothing when the tables are not there yet)."""
    bind = s.get_bind()
    engine = bind if isinstance(bind, sa.Engine) else bind.engine
    if not sa.inspect(s.connection()).has_table("remediation_loops"):
        return []
    store = RemediationStore(engine)
    return [describe(store, loop) for loop in reversed(store.loops(incident_id=incident_id))]


def stuck(loops: Sequence[LoopRow], now: datetime) -> list[LoopRow]:
    """The loops past their deadline and not final."""
    return [lp for lp in loops if not lp.final and now > (_utc(lp.deadline_at) or now)]
