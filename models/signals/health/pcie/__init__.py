"""PCIe: the GPU's link below its width or generation, or replaying too often.

- width below the maximum (x16 trained as x8): a seating, riser or slot fault, whatever the load;
- generation below the maximum in every busy minute of `pcie_gen_window_s`, busy for at least half
  of it (a GPU trains its link down when idle, so only a busy link counts);
- more than `pcie_replays_per_min` replays a minute (DCGM's PCIe health watch, DCGM_FR_PCI_REPLAY_RATE).

All ask for the mechanics to be checked (reseat, riser, cabling), as the catalog's CHECK_MECHANICALS.
"""

from __future__ import annotations

import math

from models.signals.finding import Finding
from models.signals.health.history import last, window_increase
from models.signals.health.records import GpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction


def _finding(rec: GpuHealth, message: str, condition: str, details: dict[str, object]) -> Finding:
    return Finding("pcie_link", Family.PCIE, Category.HARDWARE, message, rec.since.get(condition, rec.observed_at),
                   ImmediateAction.CHECK_MECHANICALS, None, "PCIe link degraded", details=details)


def check(rec: GpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    r = rec.reading
    out: list[Finding] = []
    if r.pcie_width is not None and r.pcie_width_max and r.pcie_width < r.pcie_width_max:
        out.append(_finding(rec, f"PCIe link trained at x{r.pcie_width} of x{r.pcie_width_max}", "pcie_width",
                            {"width": r.pcie_width, "width_max": r.pcie_width_max}))
    gens = [s.busy_gen for s in last(rec.minutes, policy.pcie_gen_window_s) if s.busy_gen is not None]
    busy_needed = math.ceil(policy.pcie_gen_window_s / 60 / 2)
    if len(gens) >= busy_needed and r.pcie_gen_max and max(gens) < r.pcie_gen_max:
        out.append(_finding(rec, f"PCIe link at Gen{max(gens)} of Gen{r.pcie_gen_max} in every busy minute of the "
                            f"last {policy.pcie_gen_window_s / 60:.0f} min ({len(gens)})", "pcie_gen",
                            {"gen": max(gens), "gen_max": r.pcie_gen_max, "busy_minutes": len(gens)}))
    replays, covered = window_increase(rec.minutes, "pcie_replays", 60)
    if replays is not None and covered > 0 and replays * 60 / covered > policy.pcie_replays_per_min:
        out.append(_finding(rec, f"{replays} PCIe replays in the last minute (more than {policy.pcie_replays_per_min} "
                            "a minute)", "pcie_replays", {"replays": replays}))
    return tuple(out)
