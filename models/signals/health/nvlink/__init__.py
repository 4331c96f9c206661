"""NVLink: a link down, or its error counters rising (an interconnect fault, as Xid 74).

- A link the agent has seen active that is inactive now is down (DCGM_FR_NVLINK_DOWN; NVIDIA Health
  Validation's `nvlink_active` allows none); a link never trained (a card without its bridge) is not.
- Replay and recovery errors: `nvlink_replay_max` or more in `nvlink_window_s` (DCGM fails the GPU
  on one, DCGM_LIMIT_MAX_NVLINK_ERROR).
- CRC (flit and data) errors: `nvlink_crc_per_s` a second or more over the window
  (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR).
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.health.history import window_increase
from models.signals.health.records import GpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction, InvestigatoryAction


def _errors(rec: GpuHealth, policy: HealthPolicy) -> list[Finding]:
    out: list[Finding] = []
    replays, covered = window_increase(rec.minutes, "nvlink_replay", policy.nvlink_window_s)
    if replays is not None and replays >= policy.nvlink_replay_max:
        out.append(Finding(
            "nvlink_errors", Family.NVLINK, Category.INTERCONNECT,
            f"{replays} NVLink replay/recovery errors in {covered:.0f} s (threshold {policy.nvlink_replay_max})",
            rec.since.get("nvlink_replay", rec.observed_at), ImmediateAction.WORKFLOW_NVLINK_ERR,
            InvestigatoryAction.CONTACT_SUPPORT, "NVLink error counters rising", details={"replay_recovery": replays}))
        return out
    crc, covered = window_increase(rec.minutes, "nvlink_crc", policy.nvlink_window_s)
    if crc is not None and covered > 0 and crc / covered >= policy.nvlink_crc_per_s:
        out.append(Finding(
            "nvlink_errors", Family.NVLINK, Category.INTERCONNECT,
            f"{crc} NVLink CRC errors in {covered:.0f} s ({crc / covered:.0f}/s, threshold "
            f"{policy.nvlink_crc_per_s:g}/s)",
            rec.since.get("nvlink_crc", rec.observed_at), ImmediateAction.WORKFLOW_NVLINK_ERR,
            InvestigatoryAction.CONTACT_SUPPORT, "NVLink error counters rising", details={"crc": crc}))
    return out


def check(rec: GpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    links = rec.reading.nvlinks
    seen = set(rec.reading.nvlinks_seen)
    down = [link.link for link in links if not link.active and link.link in seen]
    out: list[Finding] = []
    if down:
        out.append(Finding(
            "nvlink_down", Family.NVLINK, Category.INTERCONNECT,
            f"NVLink {', '.join(map(str, down))} down ({sum(link.active for link in links)} of {len(seen)} active)",
            rec.since.get("nvlinks_down", rec.observed_at), ImmediateAction.WORKFLOW_NVLINK_ERR,
            InvestigatoryAction.CONTACT_SUPPORT, "NVLink inactive", details={"links_down": down}))
    return (*out, *_errors(rec, policy))
