"""Repeat throttling, decided here: how often news of something that is still going on goes out again.

A repeat is due once its interval has passed since the last one that went out; in between, repeats
are held back, never lost: whoever sends the next one tells everything since the last (the running
count of an incident, the folded repeats of a ticket comment, a chat group's alerts). The intervals
belong to their callers:

- the stream publishes an incident's repeats on the incidents topic at most once per
  `PipelinePolicy.update_interval_s` (`publish_change`; every other change goes out at once);
- the ticket sink comments on an incident's repeats at most once per `TicketPolicy.comment_interval_s`
  (`models.ticket_policy.decide_ticket`);
- the chat notifier re-sends a changed group no sooner than its `group_interval`, an unchanged one
  every `repeat_interval` (`models.notify.decide`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class RepeatGate:
    due: bool
    wait: timedelta  # how long until the next repeat is due (zero when it is due now)


_NOW = timedelta(0)


def repeat_gate(since_last: timedelta | None, interval: timedelta) -> RepeatGate:
    """Whether a repeat may go out now, `since_last` after the last one went out (None: none went
    out yet, so it may): at most one per `interval`."""
    if since_last is None or since_last >= interval:
        return RepeatGate(True, _NOW)
    return RepeatGate(False, interval - since_last)


def publish_change(kind: str, since_last: timedelta | None, interval: timedelta) -> bool:
    """Whether the stream publishes an incident change on the incidents topic now: a repeat
    (`updated`: more faults of an open incident, which the row records at every batch) at most once
    per `interval`; an opening, reopening, reclassification, attribution or resolution at once."""
    return kind != "updated" or repeat_gate(since_last, interval).due
