"""Telling people what the remediation loops did: each transition once, as a comment on the incident's
ticket (with the DCGM output and the bug report's summary attached when there are new ones; the
ticket resolved when the node returned to service) and one chat message in the incident's thread.

The transitions are the outbox (`remediation_transitions.told_at`): a transition is marked told once
every sink had it, in order; a sink that fails leaves it (and those after it) for the next pass, and
the sinks' own markers (the ticket comment's, the chat log's key) keep a retried one from being said
twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from history.remediation_store import LoopRow, RemediationStore, TransitionRow
from models.remediation_jobs import termination_text
from respond.sinks.build import Sinks

log = logging.getLogger(__name__)
FILE_MAX = 1024 * 1024


def utcnow() -> datetime:
    return datetime.now(UTC)


def transition_text(t: TransitionRow, loop: LoopRow | None) -> str:
    """One line: where the loop went and why."""
    what = f"{t.from_stage} → {t.to_stage}" if t.from_stage else f"opened ({t.to_stage})"
    remedy = f", {loop.remedy}" if loop is not None and loop.remedy else ""
    prefix = "dry run: " if t.dry_run and not t.reason.startswith("dry run") else ""
    return f"xidpipe remediation {t.loop_id} on {t.node}{remedy}: {what}: {prefix}{t.reason}"


class TransitionNotifier:
    def __init__(self, store: RemediationStore, sinks: Sinks, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.sinks = sinks
        self.clock = clock

    def files(self, loop: LoopRow | None) -> dict[str, bytes]:
        """What the ticket gets attached: each finished validation's DCGM output, the bug report's summary."""
        if loop is None:
            return {}
        out: dict[str, bytes] = {}
        for a in self.store.attempts(loop.loop_id):
            if a.kind == "validation" and a.outcome in ("succeeded", "failed"):
                raw = termination_text(str(a.details.get("output") or "")) or json.dumps(a.details, indent=2)
                out[f"dcgm-diag-{loop.loop_id}-{a.seq}.json"] = raw.encode()[:FILE_MAX]
        if "bug_report" in loop.details:
            out[f"nvidia-bug-report-{loop.loop_id}.json"] = json.dumps(loop.details["bug_report"], indent=2).encode()
        return out

    def flush(self, limit: int = 100) -> int:
        """Tell the transitions not told yet, in order; how many were told."""
        told = 0
        for t in self.store.untold(limit):
            loop = self.store.get(t.loop_id)
            text = transition_text(t, loop)
            try:
                self.sinks.tickets.remediation_update(t.incident_id, f"xidpipe-remediation-{t.loop_id}-{t.seq}", text,
                                                      self.files(loop), resolve=t.to_stage == "returned")
                self.sinks.chat.tell(t.incident_id, f"remediation-{t.loop_id}-{t.seq}", text)
                self.sinks.pages.tell(t.incident_id, f"remediation-{t.loop_id}-{t.seq}", text)
            except Exception as exc:  # a sink's failure: this and the later transitions wait for the next pass
                log.warning("remediation transition %s/%s not told yet: %s", t.loop_id, t.seq, exc,
                            extra={"incident": t.incident_id, "loop": t.loop_id})
                break
            self.store.told([t.id], self.clock())
            told += 1
        return told

    async def run(self, stop: asyncio.Event, interval_s: float = 5.0) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.flush)
            except Exception:
                log.exception("remediation notifications: pass failed; retrying in %.0f s", interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
