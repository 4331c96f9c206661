"""The fault_events rows of a batch: drafted per fault, inserted together with one executemany."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import FaultEvent
from models.correlate import Attribution
from models.identity import gpu_key
from models.incidents import FaultObservation
from models.pci import normalize_pci

_ATTRIBUTIONS_REMEMBERED = 10_000  # attributions kept converted for the fault_events INSERT


class EventDraft:
    """A fault_events row of this batch, inserted in bulk at the end of the fault loop."""

    def __init__(self, **columns: Any) -> None:
        self.__dict__.update(columns)

    def __getattr__(self, name: str) -> Any:  # typed access for mypy; every column is set in __init__
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value


def event_draft(obs: FaultObservation, attr: Attribution, now: datetime) -> EventDraft:
    """The row of a fault not merged with an earlier report; `now` is its ingestion time."""
    g, p, r = attr.gpu, attr.pod, attr.process
    return EventDraft(
        node=obs.node, content_hash=obs.content_hash, record_id=obs.record_id, sources=obs.source,
        nvml_record_id=obs.record_id if obs.source == "nvml" else None, occurred_at=obs.occurred_at,
        ingested_at=now, kind=obs.kind, family=obs.family, code=obs.code, xid=obs.xid, sxid=obs.sxid,
        gpu=gpu_key(g.uuid, g.pci or normalize_pci(obs.pci)), gpu_uuid=g.uuid, serial=g.serial,
        pci=g.pci or normalize_pci(obs.pci), mig_uuid=g.mig_uuid, pid=r.pid, process=r.process, pod=p.pod,
        namespace=p.namespace, container=p.container, workload=attr.workload, catalog_category=obs.category,
        mnemonic=obs.mnemonic, immediate_action=obs.immediate_action, message=obs.message, raw=obs.raw,
        attribution=attr, partner_hash=None, incident_id=None, counted=True,  # the insert converts `attr`
        record_key=obs.record_key, boot_id=obs.boot_id, sympathetic=False,
    )


class FaultEventWriter:
    """Inserts fault_events rows; keeps, between batches, the INSERT per (dialect, columns) and the
    attributions already converted for it."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, tuple[str, ...]], tuple[str, bool, tuple[str, ...], dict[str, Any]]] = {}
        self._attribution_binds: dict[Attribution, Any] = {}

    def insert(self, s: Session, rows: list[dict[str, Any]]) -> None:
        """Insert fault_events rows with one executemany on the session's connection.

        The values go through the columns' own bind processors (the same conversions the ORM makes),
        applied here without the per-row statement bookkeeping, and each distinct attribution or time
        is converted once.
        """
        conn = s.connection()
        keys = tuple(rows[0])
        plan = self._plans.get((conn.dialect.name, keys))
        if plan is None:
            table = FaultEvent.__table__
            assert isinstance(table, sa.Table)
            compiled = sa.insert(table).compile(dialect=conn.dialect, column_keys=list(keys))
            order = tuple(compiled.positiontup or ()) if compiled.positional else keys
            procs = {k: table.c[k].type._cached_bind_processor(conn.dialect) for k in keys}
            plan = self._plans[(conn.dialect.name, keys)] = (str(compiled), compiled.positional, order, procs)
        sql, positional, order, procs = plan
        converted = [(i, proc) for i, k in enumerate(order) if (proc := procs[k]) is not None]
        memo: dict[Any, Any] = {}  # a batch's rows share their ingestion time, and often their attribution
        attributions = self._attribution_binds
        params: list[Any] = []
        for r in rows:
            values = [r[k] for k in order]
            for i, proc in converted:
                v = values[i]
                if v is None:
                    continue
                if isinstance(v, Attribution):
                    bound = attributions.get(v)
                    if bound is None:
                        if len(attributions) >= _ATTRIBUTIONS_REMEMBERED:
                            attributions.clear()
                        bound = attributions[v] = proc(v.to_dict())
                    values[i] = bound
                elif isinstance(v, datetime):
                    bound = memo.get(v)
                    if bound is None:
                        bound = memo[v] = proc(v)
                    values[i] = bound
                else:
                    values[i] = proc(v)
            params.append(tuple(values) if positional else dict(zip(order, values, strict=True)))
        conn.exec_driver_sql(sql, params)
