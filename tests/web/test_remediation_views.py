"""A remediation loop as the API, the incident page and `xidpipe remediation` / `xidpipe incidents show`
show it, and the operator's pause, resume and cancel recorded on the loop."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from aiohttp.test_utils import TestClient

from history.engine import make_engine
from history.remediation_store import LoopRow, RemediationStore, Reservation
from tests.web.conftest import READ
from tests.web.seed import Seeded

API = "/api/v1"
AT = datetime(2026, 11, 30, 9, tzinfo=UTC)


def open_loop(url: str, incident_id: str, *, overdue: bool = False) -> str:
    store = RemediationStore(make_engine(url))
    loop = LoopRow(loop_id="rl-00112233445566778899", incident_id=incident_id, node="node-b", gpu="GPU-b2",
                   card="serial:b2", pool="", family="gpu_lost", cordoned_at=AT.isoformat(), stage="queued",
                   reason="next: reboot_node: NVIDIA's action RESTART_BM for Xid 79", opened_at=AT, stage_since=AT,
                   updated_at=AT, deadline_at=AT + timedelta(hours=1 if overdue else 10_000))
    stored, opened = store.open(loop)
    assert opened
    moved = store.change(stored, stage="executing", reason="drained (node): the pods are evicted", at=AT,
                         remedy="reboot_node", attempt=1,
                         reserve=Reservation("reboot_node", 1, "job", "xidpipe-reboot-0011223344556677"))
    assert moved is not None
    store.engine.dispose()
    return loop.loop_id


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", "remediation", *args, "--database-url", url],
                          capture_output=True, text=True, timeout=120, check=False)


async def test_the_incident_shows_its_remediation_in_the_api_and_the_page(client: TestClient,
                                                                          seeded: Seeded) -> None:
    loop = open_loop(seeded.url, seeded.lost_b)
    resp = await client.get(f"{API}/incidents/{seeded.lost_b}", headers=READ)
    assert resp.status == 200
    [shown] = (await resp.json())["remediation"]
    assert (shown["loop_id"], shown["stage"], shown["remedy"]) == (loop, "executing", "reboot_node")
    assert [t["to"] for t in shown["transitions"]] == ["queued", "executing"]
    assert shown["attempts"][0]["job"] == "xidpipe-reboot-0011223344556677"
    assert not shown["stuck"] and not shown["final"]
    page = await client.get(f"/incidents/{seeded.lost_b}", headers=READ)
    html = await page.text()
    assert "<h2>Remediation</h2>" in html and f'id="remediation-{loop}"' in html
    assert "xidpipe-reboot-0011223344556677" in html
    other = await (await client.get(f"{API}/incidents/{seeded.bert}", headers=READ)).json()
    assert other["remediation"] == []


def test_the_cli_lists_shows_pauses_resumes_and_cancels(seeded: Seeded) -> None:
    loop = open_loop(seeded.url, seeded.lost_b, overdue=True)
    listed = cli(seeded.url, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["loop_id"] for r in json.loads(listed.stdout)["loops"]] == [loop]
    stuck = json.loads(cli(seeded.url, "list", "--stuck", "--json").stdout)["loops"]
    assert [r["loop_id"] for r in stuck] == [loop]
    shown = cli(seeded.url, "show", loop[:8])
    assert shown.returncode == 0 and "xidpipe-reboot-0011223344556677" in shown.stdout
    assert "stuck" in shown.stdout
    assert json.loads(cli(seeded.url, "show", seeded.lost_b, "--json").stdout)["loop_id"] == loop

    assert cli(seeded.url, "pause", loop, "--by", "alice").returncode == 0
    paused = json.loads(cli(seeded.url, "show", loop, "--json").stdout)
    assert paused["paused"] and paused["paused_by"] == "alice"
    assert cli(seeded.url, "resume", loop, "--by", "alice").returncode == 0
    assert not json.loads(cli(seeded.url, "show", loop, "--json").stdout)["paused"]
    cancelled = cli(seeded.url, "cancel", loop, "--by", "bob", "--reason", "the vendor takes the node")
    assert cancelled.returncode == 0, cancelled.stderr
    asked = json.loads(cli(seeded.url, "show", loop, "--json").stdout)
    assert asked["cancel_requested"] == "cancelled by bob: the vendor takes the node"
    assert cli(seeded.url, "show", "rl-nothing").returncode == 2

    store = RemediationStore(make_engine(seeded.url))
    ended = store.change(store.get(loop), stage="cancelled", reason="cancelled by bob")  # type: ignore[arg-type]
    assert ended is not None and ended.final
    refused = cli(seeded.url, "pause", loop)
    assert refused.returncode == 4 and "has ended" in refused.stderr

    incident = subprocess.run([sys.executable, "-m", "xidpipe.cli", "incidents", "show", seeded.lost_b,
                               "--database-url", seeded.url], capture_output=True, text=True, timeout=120,
                              check=False)
    assert incident.returncode == 0, incident.stderr
    assert "Remediation" in incident.stdout and f"remediation {loop}: executing → cancelled" in incident.stdout
