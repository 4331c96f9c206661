"""Each remediation transition told once: a comment on the incident's ticket (the validation's DCGM
output attached, the ticket resolved when the node returned) and one reply in the incident's chat
thread; a sink that fails leaves the transitions for the next pass, which tells them once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from history.engine import make_engine
from history.migrate import upgrade
from history.remediation_store import LoopRow, RemediationStore, Reservation
from models.remediation_jobs import encode_termination
from respond.errors import TemporaryError
from respond.remediation.notify import TransitionNotifier
from respond.sinks.build import Sinks
from respond.sinks.fanout import ChatSinks, TicketSinks
from respond.sinks.notifications import ChatNotifier
from respond.sinks.outbox.chat import OutboxChat
from respond.sinks.outbox.tickets import OutboxTracker
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import TicketSink
from tests.respond.sinks.conftest import make_notice

FIXTURES = Path(__file__).resolve().parents[2] / "models" / "fixtures" / "dcgm_diag"
T = datetime(2026, 12, 1, 12, tzinfo=UTC)


class FlakyTracker(OutboxTracker):
    """The outbox tracker, refusing comments while `down`."""

    down = False

    def comment(self, key: str, body: str, marker: str) -> bool:
        if self.down:
            raise TemporaryError("tracker unavailable", 503)
        return super().comment(key, body, marker)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[RemediationStore, Sinks, FlakyTracker, OutboxChat, str]:
    engine = make_engine(f"sqlite:///{tmp_path / 'h.db'}")
    upgrade(engine)
    tracker, chat = FlakyTracker(tmp_path / "tickets"), OutboxChat(tmp_path / "chat")
    store = SinkStore(engine)
    sinks = Sinks(store, TicketSinks([TicketSink(tracker, store)]), ChatSinks([ChatNotifier(chat, store)]))
    notice = make_notice()
    sinks.tickets.submit(notice)
    sinks.chat.submit(notice)
    return RemediationStore(engine), sinks, tracker, chat, notice.incident_id


def run_loop(store: RemediationStore, incident_id: str) -> str:
    """A loop as the remediator writes it: queued to returned, one reboot and one validation."""
    lp, _ = store.open(LoopRow(loop_id="rl-7", incident_id=incident_id, node="gpu-node-03", gpu="GPU-6a1e", card="",
                               pool="", family="gpu_lost", cordoned_at=T.isoformat(), stage="queued",
                               reason="next: reboot_node: NVIDIA's action RESTART_BM for Xid 79", opened_at=T,
                               stage_since=T, updated_at=T, deadline_at=T + timedelta(hours=4)))
    current = lp
    for stage, reason, extra in (
            ("evidence", "slot 1 of 1", {"remedy": "reboot_node", "attempt": 1}),
            ("draining", "the evidence is stored", {}),
            ("executing", "drained (node): the pods are evicted", {}),
            ("validating", "the node rebooted: boot ID b1 → b2, Ready", {"validation": 1}),
            ("returning", "dcgmi diag -r 2 passed: 17 result(s) passed", {}),
            ("returned", "validation passed after reboot_node: returned to service", {})):
        reserve = None
        if stage == "validating":
            reserve = Reservation("validation", 1, "job", "xidpipe-validate-1")
        moved = store.change(current, stage=stage, reason=reason, reserve=reserve, **extra)
        assert moved is not None
        current = moved
    output = encode_termination((FIXTURES / "dcgm-3.1.0-pass.txt").read_text())
    store.finish("rl-7", "validation", 1, "succeeded", "passed", details={"output": output})
    return current.loop_id


def test_each_transition_is_a_ticket_comment_and_a_thread_reply_once(setup: tuple) -> None:  # type: ignore[type-arg]
    store, sinks, tracker, chat, incident = setup
    loop = run_loop(store, incident)
    notifier = TransitionNotifier(store, sinks)
    assert notifier.flush() == 7
    assert notifier.flush() == 0
    [key] = [row.ticket_key for s in sinks.tickets for row in [s.store.ticket(incident)] if row]
    comments = tracker.comments(key)
    told = [c for c in comments if "xidpipe remediation rl-7" in c]
    assert len(told) == 7
    assert "opened (queued)" in told[0] and "RESTART_BM" in told[0]
    assert "validating → returning: dcgmi diag -r 2 passed" in told[5]
    info = tracker.get(key)
    assert info is not None and info.resolved  # the node returned: the ticket is done
    assert f"dcgm-diag-{loop}-1.json" in info.attachments
    replies = [m for m in chat.messages("#gpu-infra") if m["thread_ts"] and "rl-7" in m["text"]]
    assert len(replies) == 7 and all(r["thread_ts"] == replies[0]["thread_ts"] for r in replies)


def test_a_failing_tracker_leaves_the_transitions_for_the_next_pass(setup: tuple) -> None:  # type: ignore[type-arg]
    store, sinks, tracker, chat, incident = setup
    run_loop(store, incident)
    notifier = TransitionNotifier(store, sinks)
    tracker.down = True
    assert notifier.flush() == 0 and len(store.untold()) == 7
    tracker.down = False
    assert notifier.flush() == 7
    [key] = [row.ticket_key for s in sinks.tickets for row in [s.store.ticket(incident)] if row]
    assert sum(1 for c in tracker.comments(key) if "xidpipe remediation rl-7" in c) == 7
    assert len([m for m in chat.messages("#gpu-infra") if "rl-7" in m["text"]]) == 7
