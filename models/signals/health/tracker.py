"""One GPU's readings over time, into the `GpuHealth` records the agent publishes: pure (no I/O, the
time is given), stateful (the agent keeps one `GpuTracker` per GPU and hands it every poll).

A poll's reading joins its clock minute's `Bucket`. The first poll of a later minute closes it: its
sample joins the minute history (a minute without polls is an empty sample, so the columns stay
aligned with the clock), the activities of the minute update the episodes, and every closed hour's
minutes merge into a sample of the hour history. The record is published when `publish_reason` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from models.signals.health.episodes import Episodes, activities, states
from models.signals.health.history import (
    HOUR_S,
    HOURS_KEPT,
    MINUTE_S,
    MINUTES_KEPT,
    Bucket,
    Sample,
    append,
    merge,
)
from models.signals.health.publish import Reason, publish_reason
from models.signals.health.records import GpuHealth, HealthHistory, HealthReading


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(slots=True)
class GpuTracker:
    node: str
    gpu_uuid: str
    pci_bus_id: str | None = None
    index: int | None = None
    heartbeat_s: float = 600.0
    minutes: HealthHistory = field(default_factory=lambda: HealthHistory(step_s=MINUTE_S))
    hours: HealthHistory = field(default_factory=lambda: HealthHistory(step_s=HOUR_S))
    episodes: Episodes = field(default_factory=Episodes)
    links_seen: set[int] = field(default_factory=set)
    bucket: Bucket | None = None
    hour: list[Sample] = field(default_factory=list)  # the closed minutes of the current clock hour
    hour_index: int | None = None
    closed: Sample | None = None  # the last closed minute with polls
    published_at: datetime | None = None
    sequence: int = 0

    def poll(self, reading: HealthReading, now: datetime) -> GpuHealth | None:
        """Take one poll; the record to publish now, or None."""
        self.links_seen.update(link.link for link in reading.nvlinks if link.active)
        minute = int(now.timestamp()) // MINUTE_S
        active = False
        if self.bucket is not None and minute > self.bucket.index:
            active = self._close(self.bucket, minute, reading.pcie_gen_max)
            self.bucket = None
        if self.bucket is None:
            self.bucket = Bucket(minute)
        self.bucket.add(reading)
        changed = bool(self.episodes.note_states(states(reading), now))
        since = 0.0 if self.published_at is None else (now - self.published_at).total_seconds()
        reason = publish_reason(first=self.published_at is None, states_changed=changed, minute_active=active,
                                since_published_s=since, heartbeat_s=self.heartbeat_s)
        if reason is None:
            return None
        return self.record(reading, now, reason)

    def record(self, reading: HealthReading, now: datetime, reason: Reason) -> GpuHealth:
        self.published_at = now
        self.sequence += 1
        seen = tuple(sorted(self.links_seen))
        return GpuHealth(
            node=self.node, record_id=f"health:{self.gpu_uuid}:{int(now.timestamp() * 1000)}:{self.sequence}",
            gpu_uuid=self.gpu_uuid, pci_bus_id=self.pci_bus_id, index=self.index, observed_at=now,
            reading=reading.model_copy(update={"nvlinks_seen": seen}) if seen else reading,
            minutes=self.minutes, hours=self.hours, since=self.episodes.onsets(), published_for=reason,
        )

    def _close(self, bucket: Bucket, minute: int, gen_max: int | None) -> bool:
        """Close the bucket's minute (and empty minutes up to `minute`); whether an activity began, went
        on or ended in it."""
        closing = bucket.sample
        end = (bucket.index + 1) * MINUTE_S
        self._keep(closing, end)
        moments = activities(self.closed, closing, gen_max)
        changed = self.episodes.note_activities(moments, _at(end))
        self.closed = closing
        for empty in range(bucket.index + 1, min(minute, bucket.index + 1 + MINUTES_KEPT)):
            self._keep(Sample(), (empty + 1) * MINUTE_S)
        return any(moments.values()) or bool(changed)

    def _keep(self, s: Sample, end: int) -> None:
        hour = (end - 1) // HOUR_S
        if self.hour_index is not None and hour > self.hour_index:
            self.hours = append(self.hours, merge(self.hour), _at((self.hour_index + 1) * HOUR_S), HOURS_KEPT)
            for empty in range(self.hour_index + 1, min(hour, self.hour_index + 1 + HOURS_KEPT)):
                self.hours = append(self.hours, Sample(), _at((empty + 1) * HOUR_S), HOURS_KEPT)
            self.hour = []
        self.hour_index = hour
        self.hour.append(s)
        self.minutes = append(self.minutes, s, _at(end), MINUTES_KEPT)
