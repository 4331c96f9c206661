"""The action record: every action xidpipe executed or decided, with its outcome, and the breaker state.

Two stores with one interface:

- `SqlActionStore(engine)`: SQL tables `actions` (one row per action) and `cordon_breaker` (one row,
  the breaker state), declared in `history.action_tables` and created by the migrations. Use it
  when several workers share one database.
- `JsonlActionStore(path)`: one JSON object per line in `path`, the breaker state in
  `<path>.breaker.json` (replaced atomically). For one worker, or for the command line on a
  laptop. The cordon times are read once and kept in memory (read again when another process
  appended), so keep the log to a few hundred thousand lines.

The per-hour breaker limit counts records with `action` `cordon` or `quarantine` (a GPU's
DeviceTaintRule) and `outcome="done"`: one per cordon, however often its request is delivered
(`cordon_recorded`). `exclusive()` is the lock the
executor holds from reading the counts to recording the cordon, across processes too (PostgreSQL:
an advisory lock; JSON Lines: `flock` on `<path>.lock`), so two responders acting at once (a
leader and one that has not yet noticed that it was fenced) never pass the breaker's limits together.
`last_cordon_version()` is the node resourceVersion the newest `done` cordon recorded
(`details.resource_version`): the executor counts the pool fresh as of it; `last_quarantine_version()`
the rule resourceVersion of the newest quarantine written (done or a dry run's), for the GPU counts.

A step with a record of its own (`respond.cordon.steps`) is recorded under its name, with its
idempotency key and the cordon it follows in `details.key` and `details.cordoned_at`;
`step_recorded` finds its `done` record, so a redelivery does not run it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from history.action_tables import actions_table, breaker_table
from models.cordon import BreakerState

# The actions the breaker's per-hour limit counts (when done), and the quarantine's written outcomes.
COUNTED_ACTIONS = ("cordon", "quarantine")
WRITTEN = ("done", "dry_run")
# The PostgreSQL advisory lock that serialises cordon decisions across responders ("xidpipe" in ASCII).
CORDON_LOCK_KEY = 0x786964706970
ActionOutcome = Literal["done", "noop", "dry_run", "skipped", "refused", "blocked", "failed", "fenced"]


def utcnow() -> datetime:
    return datetime.now(UTC)


class ActionRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: datetime = Field(default_factory=utcnow)
    action: str = Field(min_length=1, max_length=32, description=(
        "the decision's (cordon, repeat), release, breaker_trip, breaker_reset, or the name of a step with a "
        "record of its own (evict, ...)"))
    outcome: ActionOutcome
    node: str | None = None
    incident_id: str | None = None
    decision: str | None = Field(default=None, description="the decision's outcome (cordon, foreign_cordon, ...)")
    reason: str = ""
    dry_run: bool = False
    actor: str = "xidpipe"
    details: dict[str, Any] = Field(default_factory=dict)


class ActionStore(Protocol):
    def record(self, rec: ActionRecord) -> None: ...

    def cordons_since(self, since: datetime) -> int: ...

    def breaker(self) -> BreakerState: ...

    def set_breaker(self, state: BreakerState) -> None: ...

    def recent(self, limit: int = 50) -> list[ActionRecord]: ...

    def cordon_recorded(self, node: str, incident_id: str) -> bool: ...

    def last_cordon_version(self) -> int: ...

    def last_quarantine_version(self) -> int: ...

    def step_recorded(self, step: str, node: str, key: str, cordoned_at: str) -> bool: ...

    def exclusive(self) -> contextlib.AbstractContextManager[None]: ...


# --- JSON Lines -----------------------------------------------------------------------------------


class JsonlActionStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.breaker_path = self.path.with_name(self.path.name + ".breaker.json")
        self._lock = threading.Lock()
        # Times of executed cordons, kept in memory; re-read when another process wrote to the log.
        self._cordons: list[datetime] = []
        self._last_version = 0
        self._last_rule_version = 0
        self._known_size = -1

    def record(self, rec: ActionRecord) -> None:
        line = rec.model_dump_json() + "\n"
        with self._lock:
            self._refresh()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
                size = fh.tell()
            if self._known_size >= 0:
                self._known_size = size
                if rec.action in COUNTED_ACTIONS and rec.outcome == "done":
                    self._cordons.append(rec.at)
                if rec.action == "cordon" and rec.outcome == "done":
                    self._last_version = max(self._last_version, _version(rec))
                if rec.action == "quarantine" and rec.outcome in WRITTEN:
                    self._last_rule_version = max(self._last_rule_version, _version(rec))

    def _refresh(self) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size != self._known_size:
            records = self._all()
            done = [r for r in records if r.action == "cordon" and r.outcome == "done"]
            self._cordons = [r.at for r in records if r.action in COUNTED_ACTIONS and r.outcome == "done"]
            self._last_version = max((_version(r) for r in done), default=0)
            self._last_rule_version = max((_version(r) for r in records
                                           if r.action == "quarantine" and r.outcome in WRITTEN), default=0)
            self._known_size = size

    def _all(self) -> list[ActionRecord]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [ActionRecord.model_validate_json(line) for line in text.splitlines() if line.strip()]

    def cordons_since(self, since: datetime) -> int:
        with self._lock:
            self._refresh()
            return sum(1 for at in self._cordons if at >= since)

    def last_cordon_version(self) -> int:
        with self._lock:
            self._refresh()
            return self._last_version

    def last_quarantine_version(self) -> int:
        with self._lock:
            self._refresh()
            return self._last_rule_version

    def recent(self, limit: int = 50) -> list[ActionRecord]:
        return self._all()[-limit:]

    def cordon_recorded(self, node: str, incident_id: str) -> bool:
        return any(r.action == "cordon" and r.outcome == "done" and r.node == node and r.incident_id == incident_id
                   for r in self._all())

    def step_recorded(self, step: str, node: str, key: str, cordoned_at: str) -> bool:
        return any(r.action == step and r.outcome == "done" and r.node == node and _of_step(r.details, key, cordoned_at)
                   for r in self._all())

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.with_name(self.path.name + ".lock").open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def breaker(self) -> BreakerState:
        try:
            return BreakerState.model_validate_json(self.breaker_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return BreakerState()

    def set_breaker(self, state: BreakerState) -> None:
        with self._lock:
            self.breaker_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.breaker_path.with_name(self.breaker_path.name + f".{os.getpid()}.tmp")
            tmp.write_text(state.model_dump_json(), encoding="utf-8")
            os.replace(tmp, self.breaker_path)


def _version_of(details: dict[str, Any] | None) -> int:
    value = str((details or {}).get("resource_version") or "")
    return int(value) if value.isdigit() else 0


def _version(rec: ActionRecord) -> int:
    return _version_of(rec.details)


def _of_step(details: dict[str, Any] | None, key: str, cordoned_at: str) -> bool:
    return (details or {}).get("key") == key and (details or {}).get("cordoned_at") == cordoned_at


# --- SQL ------------------------------------------------------------------------------------------


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _naive_if_sqlite(engine: sa.Engine, value: datetime) -> datetime:
    value = _utc(value)
    return value.replace(tzinfo=None) if engine.dialect.name == "sqlite" else value


class SqlActionStore:
    """The action record in the database behind `engine` (`history.engine.make_engine`), migrated to head."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()  # SQLite: one process; PostgreSQL adds its advisory lock

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._lock:
            if self.engine.dialect.name != "postgresql":
                yield
                return
            with self.engine.connect() as conn:
                conn.execute(sa.select(sa.func.pg_advisory_lock(CORDON_LOCK_KEY)))
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(sa.select(sa.func.pg_advisory_unlock(CORDON_LOCK_KEY)))
                    conn.commit()

    def cordon_recorded(self, node: str, incident_id: str) -> bool:
        q = sa.select(actions_table.c.id).where(
            actions_table.c.action == "cordon", actions_table.c.outcome == "done", actions_table.c.node == node,
            actions_table.c.incident_id == incident_id).limit(1)
        with self.engine.connect() as conn:
            return conn.execute(q).first() is not None

    def last_cordon_version(self) -> int:
        q = sa.select(actions_table.c.details).where(
            actions_table.c.action == "cordon", actions_table.c.outcome == "done").order_by(
            actions_table.c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            details = conn.execute(q).scalar_one_or_none()
        return _version_of(details)

    def last_quarantine_version(self) -> int:
        q = sa.select(actions_table.c.details).where(
            actions_table.c.action == "quarantine", actions_table.c.outcome.in_(WRITTEN)).order_by(
            actions_table.c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            details = conn.execute(q).scalar_one_or_none()
        return _version_of(details)

    def step_recorded(self, step: str, node: str, key: str, cordoned_at: str) -> bool:
        q = sa.select(actions_table.c.details).where(
            actions_table.c.action == step, actions_table.c.outcome == "done", actions_table.c.node == node)
        with self.engine.connect() as conn:
            return any(_of_step(details, key, cordoned_at) for details in conn.execute(q).scalars())

    def close(self) -> None:
        self.engine.dispose()

    def record(self, rec: ActionRecord) -> None:
        row = rec.model_dump(mode="json")
        row["at"] = _naive_if_sqlite(self.engine, rec.at)
        with self.engine.begin() as conn:
            conn.execute(actions_table.insert().values(**row))

    def cordons_since(self, since: datetime) -> int:
        q = sa.select(sa.func.count()).select_from(actions_table).where(
            actions_table.c.action.in_(COUNTED_ACTIONS), actions_table.c.outcome == "done",
            actions_table.c.at >= _naive_if_sqlite(self.engine, since),
        )
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar_one())

    def recent(self, limit: int = 50) -> list[ActionRecord]:
        q = sa.select(actions_table).order_by(actions_table.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        out = []
        for row in reversed(rows):
            data = {k: v for k, v in row.items() if k != "id"}
            data["at"] = _utc(data["at"])
            out.append(ActionRecord.model_validate(data))
        return out

    def breaker(self) -> BreakerState:
        with self.engine.connect() as conn:
            state = conn.execute(sa.select(breaker_table.c.state).where(breaker_table.c.id == 1)).scalar_one_or_none()
        return BreakerState() if state is None else BreakerState.model_validate(state)

    def set_breaker(self, state: BreakerState) -> None:
        values = {"state": state.model_dump(mode="json"), "updated_at": _naive_if_sqlite(self.engine, utcnow())}
        with self.engine.begin() as conn:
            updated = conn.execute(breaker_table.update().where(breaker_table.c.id == 1).values(**values))
            if updated.rowcount == 0:
                conn.execute(breaker_table.insert().values(id=1, **values))
