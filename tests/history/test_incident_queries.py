"""`xidpipe incidents list|show` and `xidpipe stats` over a history the real store wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.stream_policy import PipelinePolicy
from streams.items import ItemMapper
from streams.store import Store
from tests.streams.records import T0, Kmsg, inventory, pods, s, serial
from tests.terminal import in_terminal


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('hist') / 'x.db'}"
    store = Store(url, PipelinePolicy())
    store.create_schema()
    a, b = Kmsg("node-a"), Kmsg("node-b")
    records = [
        inventory("node-a", T0), inventory("node-b", T0),
        pods("node-a", T0, {0: ("team-nlp", "bert-1", "main"), 1: ("team-cv", "resnet-1", "main")}),
        a.xid(0, 13, T0 + s(10), 11, "bert"), a.xid(0, 43, T0 + s(11), 11, "bert"),
        a.xid(1, 31, T0 + s(20), 12, "resnet"),
        b.xid(2, 79, T0 + s(30)),
    ]
    mapper = ItemMapper()
    items = [it for r in records for it in mapper.items(r, "topic")] + mapper.flush_all()
    store.process(items)
    store.dispose()
    return url


def xidpipe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def listed(db: str, *filters: str) -> list[dict[str, object]]:
    proc = xidpipe("incidents", "list", "--database-url", db, "--json", *filters)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout)["incidents"])


def test_filters(db: str) -> None:
    assert len(listed(db)) == 3
    assert [i["node"] for i in listed(db, "--node", "node-b")] == ["node-b"]
    assert [i["family"] for i in listed(db, "--gpu", serial("node-b", 2))] == ["gpu_lost"]
    assert [i["node"] for i in listed(db, "--xid", "13")] == ["node-a"]
    assert [i["category"] for i in listed(db, "--category", "hardware")] == ["hardware"]
    assert len(listed(db, "--namespace", "team-cv")) == 1
    assert listed(db, "--namespace", "team-none") == []


def test_pagination_and_sort(db: str) -> None:
    first = listed(db, "--limit", "2", "--sort", "first_seen")
    rest = listed(db, "--limit", "2", "--offset", "2", "--sort", "first_seen")
    assert len(first) == 2 and len(rest) == 1
    assert [i["node"] for i in first + rest] == ["node-b", "node-a", "node-a"]


def test_show_prints_the_dossier_and_timeline(db: str) -> None:
    (inc,) = listed(db, "--xid", "13")
    # On a terminal: rendered as sections, not Markdown: no `#` headings, no `|` table rows.
    screen = in_terminal("incidents", "show", str(inc["incident_id"])[:12], "--database-url", db, columns=100)
    assert screen.code == 0, screen.stderr
    shown = "\n".join(screen.lines)
    assert "\nTimeline\n" in shown and "Xid 13 (kernel) pid 11 bert" in shown and "bert-1" in shown
    assert not [line for line in screen.lines if line.startswith(("#", "|"))]
    # Piped: the dossier's Markdown, every id whole, and the same timeline as plain columns.
    proc = xidpipe("incidents", "show", str(inc["incident_id"])[:12], "--database-url", db)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# ") and f"| {inc['incident_id']} (`{inc['fingerprint']}`)" in proc.stdout
    assert "…" not in proc.stdout and "\nTimeline\n" in proc.stdout and "Xid 13 (kernel) pid 11 bert" in proc.stdout
    missing = xidpipe("incidents", "show", "v1:nothing", "--database-url", db)
    assert missing.returncode == 2 and "no incident 'v1:nothing'" in missing.stderr


def test_stats(db: str) -> None:
    proc = xidpipe("stats", "--database-url", db, "--json")
    data = json.loads(proc.stdout)
    assert data["incidents"]["total"] == 3 and data["fault_events"]["total"] == 4
    assert data["fault_events"]["by_code"] == {"Xid 13": 1, "Xid 43": 1, "Xid 31": 1, "Xid 79": 1}
    assert data["incidents"]["hardware_by_node"] == {"node-b": 1}


def test_a_missing_history_is_a_clear_error(tmp_path: Path) -> None:
    proc = xidpipe("incidents", "list", "--database-url", f"sqlite:///{tmp_path / 'none.db'}")
    assert proc.returncode != 0 and "no incident history" in proc.stderr
    assert not (tmp_path / "none.db").exists()  # nothing created where nothing was


def test_an_older_schema_says_to_upgrade_and_the_upgrade_mends_it(db: str, tmp_path: Path) -> None:
    from history.engine import make_engine
    from history.migrate import head_revision
    from tests.history.test_migrations import downgrade

    engine = make_engine(db)
    downgrade(engine, "0002")  # before incident_codes: an Xid filter would be an SQL error
    engine.dispose()
    proc = xidpipe("incidents", "list", "--xid", "13", "--database-url", db)
    assert proc.returncode != 0
    assert f"at schema revision 0002, this xidpipe needs {head_revision()}: run `xidpipe db upgrade`" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert xidpipe("db", "upgrade", "--database-url", db).returncode == 0
    listed = json.loads(xidpipe("incidents", "list", "--xid", "13", "--database-url", db, "--json").stdout)
    assert listed["total"] == 1  # the upgrade filled incident_codes from the stored incidents
