"""What was done about an incident, as `xidpipe incidents show` and the API read it: the tickets and
notifications of every sink, each notification with its own sink's alert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.orm import Session

from history.activity import incident_activity
from history.engine import make_engine
from history.migrate import upgrade
from respond.sinks.sink_store import SinkStore

T = datetime(2026, 11, 29, 12, tzinfo=UTC)
INCIDENT = "v2:0011223344556677@20261129T120000.000000Z"
GROUP = '#gpu-infra:{node="n1",family="gpu_lost"}'


def test_tickets_and_notifications_of_every_sink(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        upgrade(engine)
        store = SinkStore(engine)
        for sink, key, at in (("jira", "GPU-1", T), ("jira_dr", "DR-7", T + timedelta(seconds=5))):
            store.for_sink(sink).put_ticket(incident_id=INCIDENT, fingerprint="v2:0011223344556677", key=key,
                                            tracker="jira", category="hardware", count=2, now=at)
        for sink, status, transport in (("slack", "resolved", "web"), ("hook", "firing", "hook")):
            mine = store.for_sink(sink)
            mine.upsert_alert(fingerprint=INCIDENT, group_key=GROUP, channel="#gpu-infra", incident_id=INCIDENT,
                              labels={"node": "n1"}, status=status, starts_at=T, payload={}, now=T)
            mine.log_sent(group_key=GROUP, channel="#gpu-infra", thread_ts=None, last_ts=None, content_hash="h",
                          sent_at=T + timedelta(minutes=1 if sink == "slack" else 2), transport=transport)
        with Session(engine) as s:
            activity = incident_activity(s, INCIDENT)
        assert [t["key"] for t in activity["tickets"]] == ["GPU-1", "DR-7"]
        assert [(n["transport"], n["alert_status"]) for n in activity["notifications"]] == [("web", "resolved"),
                                                                                          ("hook", "firing")]
    finally:
        engine.dispose()
