"""The GPU health checks (`models.signals.health`): each fires on its condition and stays quiet just
under its threshold, from the records a tracker builds out of polls in simulated time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from models.incidents import FaultObservation
from models.node_records import EccCounts, RemappedRows
from models.signals import observations
from models.signals.health import decide
from models.signals.health.records import GpuHealth, HealthReading, LinkReading, NvlinkErrors
from models.signals.health.tracker import GpuTracker
from models.stream_policy import HealthPolicy, PipelinePolicy
from models.vocabulary import Family, ImmediateAction

T0 = datetime(2026, 11, 27, 0, 0, tzinfo=UTC)
POLL_S = 10
ROWS_OK = RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False)


def reading(**changes: object) -> HealthReading:
    """A healthy, busy H100's reading, with `changes`."""
    base: dict[str, object] = dict(
        recovery_action=0, remapped_rows=ROWS_OK, ecc=EccCounts(aggregate_corrected=0, volatile_corrected=0),
        nvlinks=tuple(LinkReading(link=i, active=True) for i in range(4)),
        nvlink_errors=NvlinkErrors(crc_flit=0, crc_data=0, replay=0, recovery=0), pcie_replays=0, pcie_gen=5,
        pcie_gen_max=5, pcie_width=16, pcie_width_max=16, clocks_event_reasons=0, temperature_c=60,
        temperature_slowdown_c=87, slowdown_margin_c=27, power_mw=400_000, power_limit_mw=700_000)
    base.update(changes)
    return HealthReading.model_validate(base)


@dataclass
class Run:
    """A tracker fed a reading per poll; what it published."""

    tracker: GpuTracker = field(default_factory=lambda: GpuTracker("gpu-node-1", "GPU-aa", "0000:3b:00.0", 0))
    now: datetime = T0
    records: list[GpuHealth] = field(default_factory=list)

    def polls(self, seconds: float, make: Callable[[int], HealthReading]) -> None:
        """Poll every POLL_S for `seconds`; `make(i)` is the reading of the i-th poll of this call."""
        for i in range(int(seconds // POLL_S)):
            rec = self.tracker.poll(make(i), self.now)
            if rec is not None:
                self.records.append(rec)
            self.now += timedelta(seconds=POLL_S)

    def faults(self, policy: PipelinePolicy | None = None) -> list[FaultObservation]:
        """Every fault of every record published, each stored once (as the store does, by content hash)."""
        seen: dict[str, FaultObservation] = {}
        for rec in self.records:
            for obs in observations(rec, policy or PipelinePolicy()) or ():
                seen.setdefault(obs.content_hash, obs)
        return list(seen.values())

    def kinds(self, policy: PipelinePolicy | None = None) -> list[str]:
        return sorted(o.kind for o in self.faults(policy))


def per_minute(minutes: int, total_per_minute: Callable[[int], int]) -> Iterator[int]:
    """Cumulative counter values, one per poll, rising by `total_per_minute(minute)` each minute."""
    value = 0
    for m in range(minutes):
        step = total_per_minute(m)
        for p in range(60 // POLL_S):
            yield value + step * (p + 1) // (60 // POLL_S)
        value += step


def test_a_flat_gpu_for_24_hours_reports_nothing_and_publishes_only_heartbeats() -> None:
    run = Run()
    run.polls(24 * 3600, lambda i: reading(clocks_event_reasons=0x1 if (i // 360) % 2 else 0,
                                           pcie_gen=1 if (i // 360) % 2 else 5))  # idle half the hours
    assert run.faults() == []
    assert {r.published_for for r in run.records} == {"first", "heartbeat"}
    assert len(run.records) == 24 * 3600 // 600
    assert len(run.records[-1].minutes) == 60 and len(run.records[-1].hours) == 23


@pytest.mark.parametrize(("rows", "kind", "action"), [
    (RemappedRows(correctable=0, uncorrectable=1, pending=True, failure=False), "row_remap_pending",
     ImmediateAction.RESET_GPU),
    (RemappedRows(correctable=0, uncorrectable=512, pending=False, failure=True), "row_remap_failure",
     ImmediateAction.CONTACT_SUPPORT),
])
def test_a_row_remapping_is_a_memory_fault_reported_once_while_it_holds(
        rows: RemappedRows, kind: str, action: ImmediateAction) -> None:
    run = Run()
    run.polls(120, lambda i: reading())
    run.polls(1800, lambda i: reading(remapped_rows=rows))  # held through three heartbeats
    [fault] = run.faults()
    assert (fault.kind, fault.family, fault.immediate_action, fault.gpu_uuid) == (kind, Family.MEMORY, action,
                                                                                   "GPU-aa")
    assert fault.occurred_at == T0 + timedelta(seconds=120)
    run.polls(60, lambda i: reading())  # reset: the condition ends
    run.polls(60, lambda i: reading(remapped_rows=rows))  # and comes back: a second fault
    assert len(run.faults()) == 2


@pytest.mark.parametrize(("pages", "pending", "kind"), [
    (62, False, None), (63, False, "retired_pages_limit"), (10, True, "retired_pages_pending"),
])
def test_retired_pages_at_their_limit_or_pending(pages: int, pending: bool, kind: str | None) -> None:
    run = Run()
    run.polls(60, lambda i: reading(remapped_rows=None, retired_sbe=pages - 2, retired_dbe=2,
                                    retired_pending=pending))
    assert run.kinds() == ([kind] if kind else [])


@pytest.mark.parametrize(("value", "action"), [(0, None), (1, ImmediateAction.RESET_GPU),
                                               (2, ImmediateAction.RESTART_BM), (4, ImmediateAction.RESET_GPU)])
def test_a_recovery_action_other_than_none_is_that_action(value: int, action: ImmediateAction | None) -> None:
    run = Run()
    run.polls(60, lambda i: reading(recovery_action=value))
    faults = run.faults()
    assert [f.immediate_action for f in faults] == ([action] if action else [])
    assert all(f.family == Family.RECOVERY_ACTION for f in faults)


def _spread(per_hour: int, minute: int) -> int:
    """Errors in one minute of an hour with `per_hour` of them, spread evenly."""
    m = minute % 60
    return (m + 1) * per_hour // 60 - m * per_hour // 60


def _sbe_run(baseline_per_hour: int, last_hour: int, hours: int = 4) -> Run:
    """`hours - 1` hours at the baseline rate, then one hour at `last_hour`."""
    run = Run()
    values = list(per_minute(hours * 60, lambda m: _spread(last_hour if m >= (hours - 1) * 60 else
                                                           baseline_per_hour, m)))
    run.polls(len(values) * POLL_S + 60, lambda i: reading(
        ecc=EccCounts(aggregate_corrected=values[min(i, len(values) - 1)], volatile_corrected=0)))
    return run


@pytest.mark.parametrize(("baseline", "last_hour", "trend"), [
    (2, 40, True),  # 20 times its own rate
    (2, 9, False),  # under sbe_min_errors (10)
    (20, 60, False),  # three times the baseline: not more
    (20, 61, True),  # just more than three times
    (0, 10, True),  # a GPU without single-bit errors that starts having them
])
def test_single_bit_errors_above_the_gpus_own_baseline_are_a_trend(baseline: int, last_hour: int,
                                                                   trend: bool) -> None:
    run = _sbe_run(baseline, last_hour)
    faults = [f for f in run.faults() if f.kind == "ecc_sbe_trend"]
    assert bool(faults) is trend, [r.minutes.sbe for r in run.records[-1:]]
    if trend:
        assert faults[0].mnemonic == "EXCESSIVE_SBE_INTERRUPTS" and faults[0].family == Family.MEMORY


def test_no_single_bit_verdict_without_a_baseline() -> None:
    run = Run()
    values = list(per_minute(60, lambda m: 5))
    run.polls(3600 + 60, lambda i: reading(ecc=EccCounts(aggregate_corrected=values[min(i, len(values) - 1)])))
    assert run.kinds() == []


def test_a_link_seen_active_and_now_down_is_an_interconnect_fault_one_never_trained_is_not() -> None:
    run = Run()
    never = (*(LinkReading(link=i, active=True) for i in range(4)), LinkReading(link=4, active=False))
    run.polls(60, lambda i: reading(nvlinks=never))
    assert run.kinds() == []
    down = (*(LinkReading(link=i, active=i != 2) for i in range(4)), LinkReading(link=4, active=False))
    run.polls(60, lambda i: reading(nvlinks=down))
    [fault] = run.faults()
    assert (fault.kind, fault.family, fault.details["links_down"]) == ("nvlink_down", Family.NVLINK, [2])


@pytest.mark.parametrize(("replays", "crc_per_s", "fault"), [
    (0, 0, False), (1, 0, True), (0, 99, False), (0, 100, True),
])
def test_nvlink_errors_against_dcgm_thresholds(replays: int, crc_per_s: int, fault: bool) -> None:
    run = Run()
    crc = list(per_minute(3, lambda m: crc_per_s * 60 if m == 1 else 0))
    rep = list(per_minute(3, lambda m: replays if m == 1 else 0))
    run.polls(3 * 60 + 10, lambda i: reading(nvlink_errors=NvlinkErrors(
        crc_flit=crc[min(i, len(crc) - 1)], crc_data=0, replay=rep[min(i, len(rep) - 1)], recovery=0)))
    assert ("nvlink_errors" in run.kinds()) is fault


@pytest.mark.parametrize(("per_min", "fault"), [(8, False), (9, True)])
def test_pcie_replays_above_eight_a_minute(per_min: int, fault: bool) -> None:
    run = Run()
    values = list(per_minute(3, lambda m: per_min if m == 1 else 0))
    run.polls(3 * 60 + 10, lambda i: reading(pcie_replays=values[min(i, len(values) - 1)]))
    assert ("pcie_link" in run.kinds()) is fault


def test_a_narrow_pcie_link_is_a_fault_at_once() -> None:
    run = Run()
    run.polls(20, lambda i: reading(pcie_width=8))
    [fault] = run.faults()
    assert (fault.kind, fault.family, fault.immediate_action) == ("pcie_link", Family.PCIE,
                                                                  ImmediateAction.CHECK_MECHANICALS)


@pytest.mark.parametrize(("busy_minutes", "fault"), [(4, False), (5, True)])
def test_a_busy_link_below_its_generation_for_half_the_window(busy_minutes: int, fault: bool) -> None:
    run = Run()

    def make(i: int) -> HealthReading:
        minute = i * POLL_S // 60
        busy = minute < busy_minutes
        return reading(pcie_gen=3 if busy else 1, clocks_event_reasons=0 if busy else 0x1)

    run.polls(10 * 60 + 10, make)
    assert ("pcie_link" in run.kinds()) is fault


def _thermal(minutes_slow: int, reasons: int, margin: int, power_mw: int = 400_000) -> Run:
    run = Run()

    def make(i: int) -> HealthReading:
        slow = i * POLL_S // 60 < minutes_slow
        return reading(clocks_event_reasons=reasons if slow else 0, slowdown_margin_c=margin if slow else 27,
                       power_mw=power_mw if slow else 400_000)

    run.polls(10 * 60 + 10, make)
    return run


@pytest.mark.parametrize(("minutes", "reasons", "margin", "power", "fault"), [
    (6, 0x8, 2, 400_000, True),  # HW slowdown, within 5 C of the slowdown temperature, 6 of 10 minutes
    (5, 0x8, 2, 400_000, False),  # 5 of 10: under gpud's 0.6
    (6, 0x40, 20, 400_000, True),  # HW thermal slowdown is hot by itself
    (6, 0x8, 20, 400_000, False),  # slowdown without heat or a power limit: not this fault
    (6, 0x8, 20, 690_000, True),  # ... with the draw at the limit (98.6 %)
    (6, 0x80, 20, 400_000, True),  # HW power brake
])
def test_thermal_slowdown_sustained_with_heat_or_power(minutes: int, reasons: int, margin: int, power: int,
                                                        fault: bool) -> None:
    kinds = _thermal(minutes, reasons, margin, power).kinds()
    assert ("thermal_slowdown" in kinds) is fault


def test_a_stricter_policy_is_the_streams_own() -> None:
    run = _thermal(6, 0x8, 2)
    strict = PipelinePolicy(health=HealthPolicy(thermal_min_share=0.7))
    assert "thermal_slowdown" in run.kinds() and "thermal_slowdown" not in run.kinds(strict)


def test_the_decision_is_pure_on_the_record() -> None:
    run = Run()
    run.polls(60, lambda i: reading(recovery_action=2))
    rec = GpuHealth.model_validate_json(run.records[-1].model_dump_json())  # as decoded from the wire
    assert decide(rec, PipelinePolicy()) == decide(run.records[-1], PipelinePolicy())
