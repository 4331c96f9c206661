"""Secrets in a fault's message or process name never leave through the incident timeline: the API,
the incident page and `xidpipe incidents show` redact it as the dossier does; the command also never
writes a node's control characters to the terminal."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from aiohttp.test_utils import TestClient

from history.tables import FaultEvent
from tests.web.conftest import READ, READ_TOKEN
from tests.web.seed import Seeded
from tests.web.test_pages import login

API = "/api/v1"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlLXZhbHVlLTEyMw"
SECRETS = {
    "password=": ("launch password=hunter2hunter2", "hunter2hunter2"),
    "AKIA": ("aws AKIA" + "QNOTREALKEY12345", "QNOTREALKEY12345"),
    "ghp_": ("clone ghp_" + "a1b2c3d4e5" * 4, "a1b2c3d4e5a1b2c3"),
    "xoxb-": ("slack xoxb-1234567890-abcdefghijkl", "xoxb-1234567890"),
    "db url": ("postgresql://app:pg-pass-987@db:5432/app", "pg-pass-987"),
    "jwt": (f"token {JWT}", JWT[:30]),
    "pem": ("-----BEGIN RSA PRIVATE KEY----- MIIEowIBAAKCAQEA", "MIIEowIBAAKCAQEA"),
}
ESCAPES = "\x1b[2J\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x9b31m"


def _plant(url: str, incident_id: str, message: str, process: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as c:
        first = c.execute(sa.select(sa.func.min(FaultEvent.id)).where(FaultEvent.incident_id == incident_id)).scalar()
        c.execute(sa.update(FaultEvent).where(FaultEvent.id == first).values(message=message, process=process))
    engine.dispose()


@pytest.mark.parametrize("name", sorted(SECRETS))
async def test_the_timeline_is_redacted_in_the_api_and_on_the_page(client: TestClient, seeded: Seeded,
                                                                    name: str) -> None:
    text, secret = SECRETS[name]
    _plant(seeded.url, seeded.bert, f"NVRM: Xid (PCI:0000:3b:00): 13, {text}", f"python3 {text}")
    body = await (await client.get(f"{API}/incidents/{seeded.bert}", headers=READ)).json()
    timeline = json.dumps(body["timeline"])
    assert secret not in timeline
    assert "[REDACTED]" in timeline
    await login(client, READ_TOKEN)
    html = await (await client.get(f"/incidents/{seeded.bert}")).text()
    assert secret not in html


@pytest.mark.parametrize("json_out", [False, True])
def test_incidents_show_redacts_and_prints_no_control_characters(seeded: Seeded, json_out: bool,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from xidpipe.cli import main

    _plant(seeded.url, seeded.bert, f"NVRM: Xid (PCI:0000:3b:00): 13, password=hunter2hunter2 {ESCAPES}",
           f"evil{ESCAPES}")
    args = ["incidents", "show", seeded.bert, "--database-url", seeded.url] + (["--json"] if json_out else [])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "hunter2hunter2" not in out
    assert not any(c in out for c in "\x1b\x07\x9b"), repr(out[:400])
    if not json_out:
        assert "evil" in out and "click" in out  # the text is kept, its control characters shown as escapes


def test_incidents_list_redacts_reasons_and_process_names(seeded: Seeded, capsys: pytest.CaptureFixture[str]) -> None:
    from history.tables import Incident
    from xidpipe.cli import main

    engine = sa.create_engine(seeded.url)
    with engine.begin() as c:
        c.execute(sa.update(Incident).where(Incident.incident_id == seeded.bert).values(
            reason="Xid 13 from workload 'train --token=tok-77777777'", processes=["python3 password=hunter2hunter2"]))
    engine.dispose()
    assert main(["incidents", "list", "--json", "--database-url", seeded.url]) == 0
    out = capsys.readouterr().out
    assert "tok-77777777" not in out and "hunter2hunter2" not in out and "[REDACTED]" in out


async def test_the_api_redacts_incident_reasons_and_process_names(client: TestClient, seeded: Seeded) -> None:
    from history.tables import Incident

    engine = sa.create_engine(seeded.url)
    with engine.begin() as c:
        c.execute(sa.update(Incident).where(Incident.incident_id == seeded.bert).values(
            reason="Xid 13 from workload 'train --token=tok-77777777'", processes=["python3 password=hunter2hunter2"]))
    engine.dispose()
    for path in (f"{API}/incidents", f"{API}/incidents/{seeded.bert}"):
        text = await (await client.get(path, headers=READ)).text()
        assert "tok-77777777" not in text and "hunter2hunter2" not in text and "[REDACTED]" in text
