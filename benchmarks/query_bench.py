#!/usr/bin/env python3
"""Incident-history query latency on PostgreSQL at fleet scale. Prints one JSON object.

Starts a throwaway local PostgreSQL (or uses --database-url), brings it to the current schema
with the Alembic migrations, and loads a synthetic history of --nodes nodes with --gpus-per-node
GPUs each: a GPU ledger built by the same adapter the worker uses (every node's inventory, then
cards replaced in their slot, moved to another node, and back after RMA), --incidents incidents
over a year and --events fault events spread over them (most incidents small, a few storms),
bulk-loaded with COPY (with each incident's codes and namespaces, as the worker keeps them) and then ANALYZEd.

Then it times, with --samples random parameters each, the query functions the CLI, the API and
the pages call (history.queries), each in a fresh transaction, p50/p99/max in ms:
- `list:<filter>`: one page of 50 incidents and the total, for each filter alone;
- `show`: what `xidpipe incidents show` reads: the incident, its dossier, timeline, transitions;
- `gpus_history`: a card's placements, ledger events and incidents.
Targets: list p99 <= 100 ms, show and gpus history p99 <= 50 ms.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.migrate import upgrade

MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200")
SLOTS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
         "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
NAMESPACES = tuple(f"team-{n}" for n in ("vision", "speech", "llm", "rec", "search", "infra", "robotics", "bio"))
# (family, category, codes with weights): roughly the mix a large fleet sees.
PROFILES: tuple[tuple[str, str, tuple[int, ...], float], ...] = (
    ("application", "application", (13, 31, 43, 45), 0.55),
    ("application", "suspected_hardware", (13, 31), 0.08),
    ("memory", "hardware", (48, 63, 64, 94, 95), 0.12),
    ("nvlink", "interconnect", (74,), 0.08),
    ("gpu_lost", "hardware", (79,), 0.04),
    ("gsp", "driver", (119, 120), 0.06),
    ("driver", "driver", (32, 38, 61, 62), 0.05),
    ("gpu_hardware", "hardware", (57, 58, 62), 0.02),
)
LIFECYCLES = (("open", 0.05), ("mitigated", 0.03), ("ticketed", 0.07), ("repaired", 0.05), ("rma", 0.02),
              ("returned", 0.01), ("closed", 0.77))
BASE = datetime(2026, 11, 29, tzinfo=UTC) - timedelta(days=365)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def serial_of(node: int, slot: int, generation: int = 0) -> str:
    return f"16549{generation:02d}{node:04d}{slot:02d}"


def uuid_of(serial: str) -> str:
    h = hashlib.blake2b(serial.encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Fleet:
    """Which card sits in which slot, as the synthetic history evolves."""

    def __init__(self, nodes: int, gpus: int, rng: random.Random) -> None:
        self.names = [f"gpu-node-{n:04d}" for n in range(nodes)]
        self.model = {name: MODELS[n % len(MODELS)] for n, name in enumerate(self.names)}
        self.slots = {name: [serial_of(n, i) for i in range(gpus)] for n, name in enumerate(self.names)}
        self.rng = rng

    def inventory(self, node: str, at: datetime) -> dict[str, Any]:
        return {
            "schema_version": 1, "node": node, "record_id": f"inventory:{node}:{at.timestamp():.0f}",
            "emitted_at": at.isoformat(), "kind": "inventory", "driver_version": "550.127.05",
            "cuda_driver_version": 12040,
            "gpus": [{"index": i, "uuid": uuid_of(serial), "pci_bus_id": "0000" + SLOTS[i].upper(), "serial": serial,
                      "name": self.model[node], "vbios_version": "96.00.99.00.01", "mig_devices": [],
                      "numa_node": i // 4} for i, serial in enumerate(self.slots[node])],
        }


def build_ledger(engine: sa.Engine, fleet: Fleet, rng: random.Random, swaps: int) -> dict[str, Any]:
    """Every node's first inventory, then `swaps` replacements, moves and returns, through the worker's adapter."""
    from history.ledger_store import apply_inventory

    began = time.monotonic()
    calls = 0

    def observe(s: Session, node: str, at: datetime) -> None:
        nonlocal calls
        inv = fleet.inventory(node, at)
        apply_inventory(s, node, at, inv["gpus"], driver=inv["driver_version"])
        calls += 1

    with Session(engine) as s:
        for node in fleet.names:
            observe(s, node, BASE)
        s.commit()
        spare: list[str] = []
        for k in range(swaps):
            at = BASE + timedelta(days=30 + k * 300 / max(swaps, 1))
            node = rng.choice(fleet.names)
            slot = rng.randrange(len(SLOTS))
            old = fleet.slots[node][slot]
            if k % 3 == 2 and spare:
                new = spare.pop(0)  # a card back from RMA, in a different node
            else:
                new = serial_of(fleet.names.index(node), slot, generation=1 + k % 90)
            fleet.slots[node][slot] = new
            spare.append(old)
            observe(s, node, at)
            if k % 100 == 99:
                s.commit()
        s.commit()
    return {"inventories": calls, "seconds": round(time.monotonic() - began, 1)}


def copy_rows(engine: sa.Engine, table: str, columns: list[str], rows: Iterator[tuple[Any, ...]]) -> int:
    n = 0
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
                n += 1
        raw.commit()
    finally:
        raw.close()
    return n


def event_counts(incidents: int, events: int, rng: random.Random) -> list[int]:
    """Fault events per incident: mostly a handful, a long tail of storms, summing to `events`."""
    weights = [min(rng.paretovariate(1.2), 500.0) for _ in range(incidents)]
    scale = (events - incidents) / sum(weights)
    counts = [1 + int(w * scale) for w in weights]
    short = events - sum(counts)
    for i in range(abs(short)):
        j = i % incidents
        if short > 0:
            counts[j] += 1
        elif counts[j] > 1:
            counts[j] -= 1
    return counts


def load_history(engine: sa.Engine, fleet: Fleet, rng: random.Random, incidents: int, events: int) -> dict[str, Any]:
    began = time.monotonic()
    counts = event_counts(incidents, events, rng)
    cumulative = [p[3] for p in PROFILES]
    life_names = [name for name, _ in LIFECYCLES]
    life_weights = [w for _, w in LIFECYCLES]
    incident_rows: list[tuple[Any, ...]] = []
    plan: list[tuple[str, str, int, str, str, tuple[int, ...], datetime, datetime, int, str, str]] = []
    open_fps: set[str] = set()
    for n in range(incidents):
        node = rng.choice(fleet.names)
        slot = rng.randrange(len(SLOTS))
        family, category, codes, _ = rng.choices(PROFILES, weights=cumulative)[0]
        first = BASE + timedelta(seconds=rng.uniform(0, 364 * 86400))
        span = timedelta(seconds=min(counts[n] * rng.uniform(1, 120), 6 * 86400))
        last = first + span
        fp = "v1:" + hashlib.blake2b(f"{node}|{SLOTS[slot]}|{family}".encode(), digest_size=8).hexdigest()
        lifecycle = rng.choices(life_names, weights=life_weights)[0]
        status = "open" if lifecycle != "closed" and fp not in open_fps and rng.random() < 0.5 else "resolved"
        if status == "open":
            open_fps.add(fp)
        incident_id = f"{fp}@{first.strftime('%Y%m%dT%H%M%S.%fZ')}"
        serial = fleet.slots[node][slot]
        ns = rng.choice(NAMESPACES)
        workload = f"{ns}/job-{rng.randrange(5000)}/trainer"
        plan.append((incident_id, node, slot, serial, workload, codes, first, last, counts[n], ns, family))
        incident_rows.append((
            incident_id, fp, node, SLOTS[slot], family, status, category,
            f"synthetic {category} fault on {node}", counts[n], first, last, first, last,
            None if status == "open" else last + timedelta(hours=1), None, uuid_of(serial), serial, SLOTS[slot],
            json.dumps([f"Xid {c}" for c in codes[:counts[n]]]),
            json.dumps([f"{workload.split('/')[0]}/pod-{n}/trainer"]),
            json.dumps([f"python[{1000 + n % 60000}]"]), json.dumps([workload]), "RESTART_APP", None, None,
            category in ("hardware", "interconnect"), 1, lifecycle,
        ))
    icols = ["incident_id", "fingerprint", "node", "gpu", "family", "status", "category", "reason", "count",
             "first_seen", "last_seen", "opened_at", "updated_at", "resolved_at", "previous_incident_id", "gpu_uuid",
             "serial", "pci", "codes", "pods", "processes", "workloads", "immediate_action", "investigatory_action",
             "description", "cordon_requested", "version", "lifecycle"]
    copy_rows(engine, "incidents", icols, iter(incident_rows))
    del incident_rows

    def fault_rows() -> Iterator[tuple[Any, ...]]:
        seq = 0
        for incident_id, node, slot, serial, workload, codes, first, last, count, ns, family in plan:
            step = (last - first) / max(count, 1)
            pod = f"pod-{seq % 100000}"
            for k in range(count):
                seq += 1
                xid = codes[k % len(codes)]
                at = first + step * k
                pid = 1000 + seq % 60000
                raw = (f"{at:%b %d %H:%M:%S} {node} kernel: NVRM: Xid (PCI:{SLOTS[slot][:-2]}): {xid}, "
                       f"pid={pid}, name=python, synthetic fault {seq}")
                attribution = {"gpu": {"uuid": uuid_of(serial), "serial": serial, "pci": SLOTS[slot]},
                               "workload": workload}
                yield (node, f"{seq:032x}", f"kmsg:{node}:{seq}", "kernel", None, None, at, at, "xid",
                       family, f"Xid {xid}", xid, None, SLOTS[slot], uuid_of(serial), serial, SLOTS[slot], None, pid,
                       "python", pod, ns, "trainer", workload, "application", None, None, f"synthetic fault {seq}",
                       raw, json.dumps(attribution), incident_id)

    fcols = ["node", "content_hash", "record_id", "sources", "nvml_record_id", "partner_hash", "occurred_at",
             "ingested_at", "kind", "family", "code", "xid", "sxid", "gpu", "gpu_uuid", "serial", "pci", "mig_uuid",
             "pid", "process", "pod", "namespace", "container", "workload", "catalog_category", "mnemonic",
             "immediate_action", "message", "raw", "attribution", "incident_id"]
    loaded = copy_rows(engine, "fault_events", fcols, fault_rows())
    copy_rows(engine, "incident_codes", ["incident_id", "code", "xid"],
              ((p[0], f"Xid {c}", c) for p in plan for c in p[5][:p[8]]))
    copy_rows(engine, "incident_namespaces", ["incident_id", "namespace"], ((p[0], p[9]) for p in plan))
    node_rows = ((node, "inventory", f"inventory:{node}:bench", BASE, json.dumps(fleet.inventory(node, BASE)))
                 for node in fleet.names)
    copy_rows(engine, "node_state", ["node", "kind", "record_id", "valid_from", "payload"], node_rows)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("VACUUM ANALYZE"))
    return {"incidents": incidents, "fault_events": loaded, "max_events_per_incident": max(counts),
            "seconds": round(time.monotonic() - began, 1)}


def measure(engine: sa.Engine, samples: int, fn: Callable[[Session], Any]) -> dict[str, float]:
    times: list[float] = []
    for _ in range(samples):
        with Session(engine) as s:
            t0 = time.perf_counter()
            fn(s)
            times.append((time.perf_counter() - t0) * 1000)
            s.rollback()
    return {"p50_ms": round(statistics.median(times), 2), "p99_ms": round(pct(times, 99), 2),
            "max_ms": round(max(times), 2), "samples": samples}


def run_queries(engine: sa.Engine, fleet: Fleet, rng: random.Random, samples: int) -> dict[str, Any]:
    from history.queries import (
        IncidentFilter,
        find_incident,
        gpu_history,
        incident_transitions,
        list_incidents,
        timeline,
    )
    from respond.dossier_builder import build_dossier

    with Session(engine) as s:
        ids: list[str] = list(s.scalars(sa.select(sa.column("incident_id")).select_from(sa.table("incidents"))
                             .order_by(sa.func.random()).limit(samples)))
        serials = list(s.scalars(sa.text("SELECT serial FROM gpu_cards ORDER BY random() LIMIT :n"),
                                 {"n": samples})) if sa.inspect(engine).has_table("gpu_cards") else []
    day = timedelta(days=1)

    def rand_time() -> datetime:
        return BASE + timedelta(days=rng.uniform(0, 350))

    filters: dict[str, Callable[[], IncidentFilter]] = {
        "none": lambda: IncidentFilter(),
        "node": lambda: IncidentFilter(node=rng.choice(fleet.names)),
        "gpu": lambda: IncidentFilter(gpu=rng.choice(fleet.slots[rng.choice(fleet.names)])),
        "xid": lambda: IncidentFilter(xid=rng.choice((13, 31, 48, 74, 79, 119, 94))),
        "category": lambda: IncidentFilter(category=rng.choice(("application", "hardware", "interconnect"))),
        "status": lambda: IncidentFilter(status=rng.choice(("open", "resolved"))),
        "lifecycle": lambda: IncidentFilter(lifecycle=rng.choice(("open", "ticketed", "rma", "closed"))),
        "time_range": lambda: (lambda t: IncidentFilter(since=t, until=t + 7 * day))(rand_time()),
        "namespace": lambda: IncidentFilter(namespace=rng.choice(NAMESPACES)),
        "owner": lambda: IncidentFilter(owner=f"job-{rng.randrange(5000)}/"),
    }
    out: dict[str, Any] = {}
    for name, make in filters.items():
        def page(s: Session, make: Callable[[], IncidentFilter] = make) -> Any:
            return list_incidents(s, make(), limit=50)

        out[f"list:{name}"] = measure(engine, samples, page)

    pending = iter(ids * 2)

    def show(s: Session) -> None:
        row = find_incident(s, next(pending))
        assert row is not None
        build_dossier(s, row)
        timeline(s, row.incident_id)
        incident_transitions(s, row.incident_id)

    out["show"] = measure(engine, samples, show)
    if serials:
        cards = iter(serials * 2)
        out["gpus_history"] = measure(engine, samples, lambda s: gpu_history(s, next(cards)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", help="an empty PostgreSQL database (default: start a local one)")
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--gpus-per-node", type=int, default=8, choices=range(1, len(SLOTS) + 1))
    ap.add_argument("--incidents", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--swaps", type=int, default=1500, help="card replacements, moves and RMA returns in the ledger")
    ap.add_argument("--samples", type=int, default=200, help="timed queries per measurement")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    pg = None
    url = args.database_url
    if url is None:
        from xidpipe.localinfra.postgres import LocalPostgres

        pg = LocalPostgres().start()
        url = pg.url
    engine = make_engine(url)
    try:
        began = time.monotonic()
        upgrade(engine)
        fleet = Fleet(args.nodes, args.gpus_per_node, rng)
        ledger = build_ledger(engine, fleet, rng, args.swaps)
        history = load_history(engine, fleet, rng, args.incidents, args.events)
        load_s = round(time.monotonic() - began, 1)
        results = run_queries(engine, fleet, rng, args.samples)
    finally:
        engine.dispose()
        if pg is not None:
            pg.stop()
    lists = [v["p99_ms"] for k, v in results.items() if k.startswith("list:")]
    report = {
        "benchmark": "query_bench",
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "data": {"nodes": args.nodes, "gpus": args.nodes * args.gpus_per_node, "ledger": ledger, **history,
                 "load_seconds": load_s},
        "queries": results,
        "targets": {
            "list_p99_max_ms": max(lists), "list_p99_target_ms": 100, "list_met": max(lists) <= 100,
            "show_p99_ms": results["show"]["p99_ms"], "show_met": results["show"]["p99_ms"] <= 50,
            "gpus_history_p99_ms": results.get("gpus_history", {}).get("p99_ms"),
            "gpus_history_met": results.get("gpus_history", {}).get("p99_ms", 1e9) <= 50,
        },
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
