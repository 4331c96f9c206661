"""The fleet bench's targets and its last recorded figures: what `benchmarks/fleet_bench.py` prints under
`targets` (each figure against its target) and `regressions` (each figure more than 20% worse than
the figure last recorded for the same command line, in `benchmarks/fleet_recorded.json`).

A configuration is the command line's shape: the mode, the workers, the nodes and the kernel rate
(`fleet 1w 2000n 0.5/s`, `cordon 5000n 10%`). `--record` writes a run's figures as the configuration's
recorded ones, with the commit and the load average they were taken at.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).with_name("fleet_recorded.json")
REGRESSION = 0.20  # a figure this much worse than the recorded one is reported


@dataclass(frozen=True)
class Figure:
    """One figure of a run: where it is in the run's JSON, and whether less is better."""

    name: str
    get: Callable[[dict[str, Any]], float | None]
    lower_is_better: bool = True


def _ms(which: str, q: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda run: (run.get("xid_to_incident_commit_ms", {}).get(which) or {}).get(q)


FLEET_FIGURES = (
    Figure("steady_p99_ms", _ms("steady_ms", "p99")),
    Figure("steady_p50_ms", _ms("steady_ms", "p50")),
    Figure("burst_p99_ms", _ms("burst_ms", "p99")),
    Figure("consumed_records_per_s", lambda run: run.get("consumed_records_per_s"), lower_is_better=False),
    Figure("lag_max", lambda run: run.get("lag_max")),
    Figure("rss_above_idle_mb_per_1000_nodes",
           lambda run: (run.get("memory") or {}).get("rss_above_idle_mb_per_1000_nodes")),
)
SLOPE = Figure("rss_mb_per_1000_more_nodes", lambda slope: slope.get("rss_mb_per_1000_more_nodes"))
def _burst(key: str, q: str | None = None) -> Callable[[dict[str, Any]], float | None]:
    def get(out: dict[str, Any]) -> float | None:
        value = (out.get("burst") or {}).get(key)
        return (value or {}).get(q) if q is not None else value
    return get


CORDON_FIGURES = (
    Figure("unschedulable_p99_ms", _burst("xid_to_unschedulable_ms", "p99")),
    Figure("unschedulable_p50_ms", _burst("xid_to_unschedulable_ms", "p50")),
    Figure("burst_s", _burst("seconds")),
)

# Targets per configuration: figure → (at most or at least, the limit).
TARGETS: dict[str, dict[str, tuple[str, float]]] = {
    "fleet 1w 2000n 0.5/s": {"steady_p99_ms": ("≤", 500), "burst_p99_ms": ("≤", 1000),
                             "rss_mb_per_1000_more_nodes": ("≤", 30)},
    "fleet 1w 2000n 1/s": {"consumed_records_per_s": ("≥", 2000), "steady_p99_ms": ("≤", 1000)},
    "fleet 3w 10000n 0.1/s": {"steady_p99_ms": ("≤", 1000)},
    "cordon 5000n 10%": {"unschedulable_p99_ms": ("≤", 1000)},
}


def fleet_config(workers: int, nodes: int, kernel_rate: float) -> str:
    return f"fleet {workers}w {nodes}n {kernel_rate:g}/s"


def cordon_config(nodes: int, burst_share: float) -> str:
    return f"cordon {nodes}n {burst_share * 100:g}%"


def fleet_figures(result: dict[str, Any]) -> Iterator[tuple[str, dict[str, float]]]:
    """(configuration, figures) of each run of a fleet bench's result."""
    rate = result["rates_per_node"]["kernel_lines_per_s"]
    for i, run in enumerate(result.get("runs", [])):
        if "error" in run:
            continue
        figures = {f.name: v for f in FLEET_FIGURES if (v := f.get(run)) is not None}
        figures["sustained"] = 1.0 if run.get("sustained") else 0.0
        slope = result.get("memory_slope") or {}
        if i == 0 and SLOPE.get(slope) is not None:
            figures[SLOPE.name] = SLOPE.get(slope)  # type: ignore[assignment]
        yield fleet_config(run["workers"], result["nodes"], rate), figures


def cordon_figures(result: dict[str, Any]) -> Iterator[tuple[str, dict[str, float]]]:
    figures = {f.name: v for f in CORDON_FIGURES if (v := f.get(result)) is not None}
    yield cordon_config(result["nodes"], result["burst_share"]), figures


def _better(name: str) -> bool:
    """Whether less is better for the figure `name`."""
    for f in (*FLEET_FIGURES, SLOPE, *CORDON_FIGURES):
        if f.name == name:
            return f.lower_is_better
    return name != "sustained"


def judge(configs: list[tuple[str, dict[str, float]]], recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each figure against its configuration's target, and those more than 20% worse than recorded."""
    recorded = load_recorded() if recorded is None else recorded
    targets: list[dict[str, Any]] = []
    regressions: list[dict[str, Any]] = []
    for config, figures in configs:
        for name, (op, limit) in TARGETS.get(config, {}).items():
            value = figures.get(name)
            met = None if value is None else (value <= limit if op == "≤" else value >= limit)
            targets.append({"config": config, "figure": name, "value": value, "target": f"{op} {limit:g}",
                            "met": met})
        if not figures.get("sustained", 1.0):
            targets.append({"config": config, "figure": "sustained", "value": False, "target": "true", "met": False})
        before = (recorded.get(config) or {}).get("figures", {})
        for name, value in figures.items():
            old = before.get(name)
            if old is None or name == "sustained":
                continue
            worse = (value - old) / old if _better(name) else (old - value) / old if old else 0.0
            if old and worse > REGRESSION:
                regressions.append({"config": config, "figure": name, "value": value, "recorded": old,
                                    "worse_pct": round(worse * 100, 1),
                                    "recorded_at": recorded[config].get("commit")})
    return {"targets": targets, "targets_met": all(t["met"] for t in targets) if targets else None,
            "regressions": regressions, "recorded_in": str(RECORDED.name)}


def load_recorded() -> dict[str, Any]:
    if not RECORDED.exists():
        return {}
    data: dict[str, Any] = json.loads(RECORDED.read_text())
    return data


def record(configs: list[tuple[str, dict[str, float]]], load_1m: float) -> None:
    """Write the figures as each configuration's recorded ones."""
    data = load_recorded()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=RECORDED.parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    for config, figures in configs:
        data[config] = {"figures": figures, "commit": commit, "load_1m": load_1m,
                        "taken": datetime.now(UTC).strftime("%Y-%m-%d")}
    RECORDED.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
