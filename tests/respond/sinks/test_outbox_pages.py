"""Pages in the outbox: with no paging destination configured, every paging event is written as
PagerDuty and a CloudEvents webhook would get it; the demo's incidents as golden files
(UPDATE_GOLDEN=1 rewrites them after an intended change, then review the diff)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from models.dossier import Dossier
from respond.sinks.build import build_sinks
from respond.sinks.cloudevents import schema
from respond.sinks.model import IncidentNotice
from respond.sinks.outbox import OutboxPager
from respond.sinks.pages import PageSink
from respond.sinks.settings import SinkSettings
from respond.sinks.sink_store import SinkStore
from tests.fakes.cloudevents.receiver import spec_errors
from tests.fakes.pagerduty.server import errors_of
from tests.models.test_dossier import DEMO
from tests.respond.sinks.conftest import Clock, make_notice, migrated

GOLDEN = Path(__file__).parent / "golden" / "demo"
KEY = "0" * 32


def files(root: Path, kind: str) -> list[Path]:
    return sorted((root / kind).glob("*/*.json"))


def test_the_outbox_pages_only_when_no_paging_destination_is_configured(tmp_path: Path) -> None:
    url = migrated(f"sqlite:///{tmp_path}/s.db")
    default = build_sinks(SinkSettings(outbox_dir=tmp_path / "outbox"), url)
    assert default.pages.names == ("outbox",)
    configured = build_sinks(SinkSettings(outbox_dir=tmp_path / "outbox", pagerduty_routing_key=SecretStr(KEY),
                                          cloudevents_url="http://127.0.0.1:9/events"), url)
    assert configured.pages.names == ("pagerduty", "cloudevents")
    for sinks in (default, configured):
        sinks.store.engine.dispose()


def test_each_event_is_a_file_as_pagerduty_and_a_webhook_get_it(tmp_path: Path, store: SinkStore,
                                                                 clock: Clock) -> None:
    root = tmp_path / "outbox"
    pages = PageSink(OutboxPager(root), store, clock=clock, incident_url_base="https://xidpipe.example")
    pages.submit(make_notice(incident="inc-1"))
    pages.submit(make_notice(incident="inc-1"))  # nothing new: no file
    clock.advance(minutes=5)
    pages.submit(make_notice(incident="inc-1", status="resolved"))
    pd = [json.loads(p.read_text()) for p in files(root, "pagerduty")]
    assert sorted(b["event_action"] for b in pd) == ["resolve", "trigger"]
    assert all("routing_key" not in b for b in pd)  # a secret, never written
    assert all(errors_of({**b, "routing_key": KEY}, frozenset()) == [] for b in pd)
    ce = [json.loads(p.read_text()) for p in files(root, "cloudevents")]
    assert sorted(e["type"] for e in ce) == ["io.xidpipe.incident.opened", "io.xidpipe.incident.resolved"]
    assert all(spec_errors(e, schema()) == [] for e in ce)
    assert {p.parent.name for p in files(root, "cloudevents")} == {"inc-1"}


def _opened(d: Dossier, tmp_path: Path, store: SinkStore) -> tuple[dict[str, object], dict[str, object]]:
    root = tmp_path / d.incident_id.replace(":", "_")
    pages = PageSink(OutboxPager(root), store, clock=Clock(d.first_seen),
                     incident_url_base="https://xidpipe.example")
    pages.submit(IncidentNotice(dossier=d.model_copy(update={"status": "open"})))
    [pd] = [p for p in files(root, "pagerduty") if p.name.startswith("opened-")]
    [ce] = [p for p in files(root, "cloudevents") if p.name.startswith("opened-")]
    return json.loads(pd.read_text()), json.loads(ce.read_text())


@pytest.mark.parametrize("path", DEMO, ids=[p.name.removesuffix(".dossier.json") for p in DEMO])
def test_the_demos_pages_golden(path: Path, tmp_path: Path, store: SinkStore) -> None:
    pd, ce = _opened(Dossier.model_validate_json(path.read_text()), tmp_path, store)
    name = path.name.removesuffix(".dossier.json")
    for suffix, got in (("pagerduty", pd), ("cloudevent", ce)):
        text = json.dumps(got, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        golden = GOLDEN / f"{name}.{suffix}.json"
        if os.environ.get("UPDATE_GOLDEN"):
            golden.write_text(text)
        assert text == golden.read_text()
    assert spec_errors(ce, schema()) == []
    assert pd["payload"]["severity"] == ce["data"]["severity"]  # type: ignore[index]
