"""`xidpipe silence add|list|expire` against a SQLite file; the notifier honours what it stores."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from models.notify import GroupPolicy
from respond.sinks.notifications import ChatNotifier
from respond.sinks.outbox import OutboxChat
from tests.respond.sinks.conftest import Clock, make_notice, open_store
from xidpipe.cli import main
from xidpipe.commands.silence import LABELS, parse_duration


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/var/xidpipe.db"
    (tmp_path / "var").mkdir()
    open_store(url)  # the responder's database: the CLI never creates one
    return url


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_add_list_expire(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "silence", "--database-url", db, "add", "--matcher", "node=gpu-node-03",
                     "--matcher", 'family=~"gpu_.*"', "--duration", "4h", "--author", "alice",
                     "--comment", "RMA in progress")
    assert rc == 0
    sid = out.strip()
    rc, out, _ = cli(capsys, "silence", "--database-url", db, "list", "--json")
    [item] = [json.loads(line) for line in out.splitlines()]
    assert item["id"] == sid and item["state"] == "active" and item["created_by"] == "alice"
    assert item["matchers"] == ['node="gpu-node-03"', 'family=~"gpu_.*"']
    ends = datetime.fromisoformat(item["ends_at"]) - datetime.fromisoformat(item["starts_at"])
    assert ends == timedelta(hours=4)
    rc, out, _ = cli(capsys, "silence", "--database-url", db, "expire", sid[:8])
    assert rc == 0 and sid in out
    rc, out, _ = cli(capsys, "silence", "--database-url", db, "list")
    assert out == "No active or pending silences (--all shows the expired).\n"
    rc, out, _ = cli(capsys, "silence", "--database-url", db, "list", "--all")
    assert sid in out and "expired" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--matcher", "node gpu-node-03", "--duration", "4h"], "not a matcher"),
    (["--matcher", "node=~[", "--duration", "4h"], "bad regular expression"),
    (["--matcher", "node=a", "--duration", "soon"], "not a duration"),
    (["--matcher", "nod=gpu-node-03", "--duration", "4h"], "unknown label 'nod' in 'nod=gpu-node-03' (did you mean"),
])
def test_add_rejects_bad_input(db: str, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    rc, _, err = cli(capsys, "silence", "--database-url", db, "add", *args, "--author", "a", "--comment", "c")
    assert rc == 2 and message in err


def test_expire_unknown(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "silence", "--database-url", db, "expire", "nope")
    assert rc == 2 and "no silence 'nope'" in err


def test_flags_on_either_side_and_the_author_defaults_to_the_login(
        db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "carol")
    monkeypatch.setenv("LOGNAME", "carol")
    rc, sid, _ = cli(capsys, "--database-url", db, "silence", "add", "-m", "node=n1", "-d", "1h", "--comment", "c")
    assert rc == 0
    for argv in (["silence", "list", "--database-url", db, "--json"], ["silence", "--database-url", db, "list",
                                                                       "--json"]):
        rc, out, _ = cli(capsys, *argv)
        [item] = [json.loads(line) for line in out.splitlines()]
        assert rc == 0 and item["id"] == sid.strip() and item["created_by"] == "carol"


def test_a_missing_database_is_an_error_and_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "var" / "xidpipe-typo.db"
    rc, out, err = cli(capsys, "silence", "--database-url", f"sqlite:///{typo}", "add", "-m", "node=n1", "-d", "1h",
                       "--comment", "c")
    assert (rc, out) == (3, "") and f"no database at {typo}" in err and "XIDPIPE_DATABASE_URL" in err
    assert not typo.exists()


def test_an_ambiguous_prefix_lists_the_silences(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [cli(capsys, "silence", "--database-url", db, "add", "-m", f"node=n{n}", "-d", "1h", "--author", "a",
               "--comment", "c")[1].strip() for n in range(20)]
    common = next(i[:1] for i in ids if sum(j.startswith(i[:1]) for j in ids) > 1)
    rc, _, err = cli(capsys, "silence", "--database-url", db, "expire", common)
    assert rc == 2 and "is ambiguous" in err
    assert sum(i in err for i in ids) >= 2 and all(i.startswith(common) for i in ids if i in err)


def test_the_labels_are_those_of_a_notification() -> None:
    assert set(LABELS) == {*make_notice().alert_labels(), "component"}


@pytest.mark.parametrize(("text", "seconds"), [("4h", 14400), ("30m", 1800), ("2h30m", 9000), ("1d", 86400),
                                               ("90s", 90), ("1w", 604800)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text).total_seconds() == seconds


def test_a_cli_silence_suppresses_the_notifier(db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _rc, sid, _ = cli(capsys, "silence", "--database-url", db, "add", "-m", "node=gpu-node-03", "-d", "1h",
                     "--author", "bob", "--comment", "maintenance")
    store = open_store(db)
    clock = Clock(datetime.now(UTC))
    n = ChatNotifier(OutboxChat(tmp_path / "outbox"), store, policy=GroupPolicy(group_wait=timedelta(0)),
                     channel_interval_s=0, clock=clock)
    out = n.submit(make_notice(node="gpu-node-03"))
    assert out.action == "suppress" and sid.strip() in out.reason and "bob" in out.reason
    assert n.submit(make_notice(node="gpu-node-04", fp="v1:0000000000000004")).action == "send"
    cli(capsys, "silence", "--database-url", db, "expire", sid.strip())
    clock.now = datetime.now(UTC) + timedelta(seconds=1)
    assert n.flush_group(n.store.group_keys()[0]).action == "send"
