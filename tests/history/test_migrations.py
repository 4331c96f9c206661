"""The Alembic migrations, up and down, on SQLite and the real PostgreSQL; the migrated schema is
exactly every table of `history.schema` (autogenerate finds nothing to change); a database whose
sink and action tables the stores made themselves upgrades cleanly; `xidpipe db upgrade|current`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from history.engine import make_engine
from history.migrate import VERSION_TABLE, alembic_config, current_revision, head_revision, upgrade
from history.schema import POSTGRESQL_ONLY_INDEXES, metadata
from xidpipe.cli import main

T = datetime(2026, 11, 29, 12, tzinfo=UTC)
HEAD = "0013"

# The tables migration 0004 brings under the migrations (before it, their stores created them).
STORE_TABLES = frozenset({"tickets", "ticket_queue", "chat_alerts", "notification_log", "chat_failures", "silences",
                          "actions", "cordon_breaker"})
# Tables that migrations after 0004 add.
LATER_TABLES = frozenset({"pending_cordons", "remediation_loops", "remediation_attempts", "remediation_transitions",
                          "gpu_rma", "pages"})
# Tables that migrations after 0004 drop (0007: fleet incidents are incidents).
DROPPED_TABLES = frozenset({"fleet_incidents"})


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
    else:
        yield request.getfixturevalue("postgres_database")


def _ours(name: str | None, type_: str, _parent: object) -> bool:
    if type_ == "index":
        return name not in POSTGRESQL_ONLY_INDEXES
    return type_ != "table" or name in metadata.tables


def diff(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_name": _ours,
                                                     "version_table": VERSION_TABLE})
        return list(compare_metadata(ctx, metadata))


def downgrade(engine: sa.Engine, revision: str) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names()) - {VERSION_TABLE}


def test_up_down_and_the_schema_matches_the_models(url: str) -> None:
    engine = make_engine(url)
    try:
        upgrade(engine)
        assert current_revision(engine) == head_revision() == HEAD
        assert diff(engine) == []
        assert tables(engine) == set(metadata.tables) and tables(engine) > STORE_TABLES
        if engine.dialect.name == "postgresql":  # the local server has pg_trgm
            assert "ix_incidents_workloads_trgm" in {i["name"] for i in sa.inspect(engine).get_indexes("incidents")}
        downgrade(engine, "0003")
        assert tables(engine) == (set(metadata.tables) - STORE_TABLES - LATER_TABLES) | DROPPED_TABLES
        downgrade(engine, "0001")
        assert current_revision(engine) == "0001"
        assert "lifecycle" not in {c["name"] for c in sa.inspect(engine).get_columns("incidents")}
        assert "gpu_cards" not in tables(engine)
        upgrade(engine)  # 0002 to the head again over 0001's tables as the downgrade left them
        assert diff(engine) == []
        downgrade(engine, "base")
        assert current_revision(engine) is None and tables(engine) == set()
        upgrade(engine)
        assert diff(engine) == []
    finally:
        engine.dispose()


def test_existing_incidents_start_open(url: str) -> None:
    engine = make_engine(url)
    try:
        upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO incidents (incident_id, fingerprint, node, gpu, family, status, category, reason, count, "
                "first_seen, last_seen, opened_at, updated_at, codes, pods, processes, workloads, cordon_requested, "
                "version) VALUES ('i1', 'fp', 'n1', '0000:18:00.0', 'gpu_lost', 'open', 'hardware', 'r', 1, :t, :t, "
                ":t, :t, '[]', '[]', '[]', '[]', false, 1)"), {"t": T.replace(tzinfo=None)})
        upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT lifecycle FROM incidents")).scalar_one() == "open"
    finally:
        engine.dispose()


def test_incident_codes_are_filled_from_existing_incidents(url: str) -> None:
    engine = make_engine(url)
    try:
        upgrade(engine, "0002")
        with engine.begin() as conn:
            for n, codes in enumerate((["Xid 13", "Xid 31", "Xid 13"], ["SXid 12028"], [])):
                conn.execute(sa.text(
                    "INSERT INTO incidents (incident_id, fingerprint, node, gpu, family, status, category, reason, "
                    "count, first_seen, last_seen, opened_at, updated_at, codes, pods, processes, workloads, "
                    "cordon_requested, version, lifecycle) VALUES (:id, 'fp', 'n1', '0000:18:00.0', 'application', "
                    "'resolved', 'application', 'r', 1, :t, :t, :t, :t, :codes, '[]', '[]', '[]', false, 1, 'open')"),
                    {"id": f"i{n}", "t": T.replace(tzinfo=None), "codes": json.dumps(codes)})
        upgrade(engine)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT incident_id, code, xid FROM incident_codes "
                                        "ORDER BY incident_id, code")).all()
        assert [tuple(r) for r in rows] == [("i0", "Xid 13", 13), ("i0", "Xid 31", 31), ("i1", "SXid 12028", None)]
        downgrade(engine, "0002")
        assert "incident_codes" not in tables(engine)
    finally:
        engine.dispose()


def test_fleet_incidents_move_into_incidents_and_back(url: str) -> None:
    from models.fleet import fleet_fingerprint

    engine = make_engine(url)
    try:
        upgrade(engine, "0006")
        t = {"t": T.replace(tzinfo=None)}
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO fleet_incidents (fleet_id, cluster, family, status, reason, nodes, first_seen, last_seen, "
                "updated_at, resolved_at) VALUES ('fleet:c1:gpu_lost@x', 'c1', 'gpu_lost', 'open', 'gpu_lost on 3 "
                "nodes', :nodes, :t, :t, :t, NULL)"), {**t, "nodes": json.dumps(["n2", "n1", "n3"])})
        upgrade(engine)
        assert "fleet_incidents" not in tables(engine)
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT fingerprint, node, gpu, component, component_id, category, count, "
                                       "status, nodes FROM incidents")).one()
        nodes = row.nodes if isinstance(row.nodes, list) else json.loads(row.nodes)
        assert (row.fingerprint, row.node, row.gpu, row.component, row.component_id, row.category, row.count,
                row.status) == (fleet_fingerprint("c1", "gpu_lost"), "c1", "fleet", "fleet", "gpu_lost", "fleet", 3,
                                "open")
        assert nodes == ["n1", "n2", "n3"]
        downgrade(engine, "0006")
        with engine.connect() as conn:
            back = conn.execute(sa.text("SELECT cluster, family, status FROM fleet_incidents")).one()
            assert tuple(back) == ("c1", "gpu_lost", "open")
            assert conn.execute(sa.text("SELECT count(*) FROM incidents")).scalar_one() == 0
    finally:
        engine.dispose()


def test_sink_rows_are_keyed_by_sink_and_the_earlier_ones_wait_for_their_sink(url: str) -> None:
    """0008: the rows of the one ticket sink and the one chat sink of before are kept, unattributed
    (`sink = ''`) until the responder gives them to the destination that wrote them; the downgrade
    keeps one row per incident or group."""
    from history.sink_tables import UNATTRIBUTED
    from respond.sinks.sink_store import SinkStore

    engine = make_engine(url)
    try:
        upgrade(engine, "0007")
        t = {"t": T.replace(tzinfo=None)}
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO tickets (incident_id, fingerprint, ticket_key, tracker, category, count, attached, "
                "created_at, updated_at, recovered) VALUES ('i1', 'fp', 'GPU-7', 'jira', 'hardware', 3, '[]', :t, :t, "
                "false)"), t)
            conn.execute(sa.text(
                "INSERT INTO ticket_queue (incident_id, payload, status, attempts, next_attempt_at, updated_at) "
                "VALUES ('i1', '{}', 'pending', 2, :t, :t)"), t)
            conn.execute(sa.text(
                "INSERT INTO chat_alerts (fingerprint, group_key, channel, incident_id, labels, status, starts_at, "
                "payload, updated_at) VALUES ('i1', '#gpu-infra:g', '#gpu-infra', 'i1', '{}', 'firing', :t, '{}', :t)"),
                t)
            conn.execute(sa.text(
                "INSERT INTO notification_log (group_key, channel, thread_ts, last_ts, content_hash, sent_at, "
                "messages, transport) VALUES ('#gpu-infra:g', 'C1', '1.1', '1.2', 'h', :t, 2, 'web')"), t)
            conn.execute(sa.text(
                "INSERT INTO chat_failures (group_key, channel, attempts, next_attempt_at, last_error, permanent, "
                "updated_at) VALUES ('#gpu-infra:g', '#gpu-infra', 1, :t, 'HTTP 503', false, :t)"), t)
        upgrade(engine)
        assert diff(engine) == []
        with engine.connect() as conn:
            for table in ("tickets", "ticket_queue", "chat_alerts", "notification_log", "chat_failures"):
                assert conn.execute(sa.text(f"SELECT sink FROM {table}")).scalars().all() == [UNATTRIBUTED]
        store = SinkStore(engine)
        assert store.adopt("tickets", "jira") == 2 and store.adopt("chat", "slack") == 3
        assert store.adopt("tickets", "jira") == 0  # given once
        jira, slack = store.for_sink("jira"), store.for_sink("slack")
        row = jira.ticket("i1")
        assert row is not None and (row.ticket_key, row.count) == ("GPU-7", 3)
        assert [j.attempts for j in jira.jobs("pending")] == [2]
        assert slack.group_keys() == ["#gpu-infra:g"] and slack.failure("#gpu-infra:g") is not None
        entry = slack.sent("#gpu-infra:g")
        assert entry is not None and (entry.thread_ts, entry.messages) == ("1.1", 2)
        assert store.for_sink("outbox").ticket("i1") is None and store.for_sink("pager").group_keys() == []
        pager = store.for_sink("pager")  # a second chat sink, the same group: rows of its own
        pager.log_sent(group_key="#gpu-infra:g", channel="#gpu-infra", thread_ts=None, last_ts=None,
                       content_hash="h2", sent_at=T, transport="webhook")
        downgrade(engine, "0007")
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT ticket_key FROM tickets")).scalars().all() == ["GPU-7"]
            assert conn.execute(sa.text("SELECT transport FROM notification_log")).scalars().all() == ["webhook"]
    finally:
        engine.dispose()


def test_db_upgrade_builds_every_table_on_an_empty_database(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade", "--database-url", url]) == 0
    assert f"migrated from (empty) to {HEAD}" in capsys.readouterr().out
    engine = make_engine(url)
    try:
        assert tables(engine) == set(metadata.tables)
        assert diff(engine) == []
        downgrade(engine, "base")
        assert current_revision(engine) is None and tables(engine) == set()
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", ["0003", None], ids=["with-the-stream-tables", "sink-database"])
def test_tables_the_stores_made_upgrade_to_head(url: str, revision: str | None) -> None:
    """Before 0004 the sink and action stores ran `create_all` on the database they opened: the
    worker's (migrated to 0003), or a database of their own (never migrated)."""
    engine = make_engine(url)
    try:
        if revision:
            upgrade(engine, revision)
        metadata.create_all(engine, tables=[metadata.tables[name] for name in sorted(STORE_TABLES)])
        t = {"t": T.replace(tzinfo=None)}
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO silences (id, matchers, starts_at, ends_at, created_by, comment, "
                                 "created_at) VALUES ('s1', '[]', :t, :t, 'ops', 'rma', :t)"), t)
            conn.execute(sa.text("INSERT INTO cordon_breaker (id, state, updated_at) VALUES (1, '{}', :t)"), t)
        upgrade(engine)
        assert current_revision(engine) == HEAD
        assert diff(engine) == []
        assert tables(engine) == set(metadata.tables)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT created_by FROM silences")).scalar_one() == "ops"
            assert conn.execute(sa.text("SELECT count(*) FROM cordon_breaker")).scalar_one() == 1
    finally:
        engine.dispose()


def test_db_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["db", "current", "--database-url", url]) == 3  # a dependency unavailable; never created
    assert "no database" in capsys.readouterr().err and not (tmp_path / "cli.db").exists()
    engine = make_engine(url)
    upgrade(engine, "0001")
    engine.dispose()
    assert main(["db", "current", "--database-url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] == "0001"
    assert main(["db", "upgrade", "--database-url", url]) == 0
    out = capsys.readouterr().out
    assert f"migrated from 0001 to {HEAD}" in out and f"revision {HEAD} (up to date)" in out
    assert main(["db", "upgrade", "--database-url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"database": url, "revision": HEAD, "head": HEAD,
                                                   "previous": HEAD}


def test_db_upgrade_hides_the_password(capsys: pytest.CaptureFixture[str], postgres_url: str) -> None:
    url = sa.make_url(postgres_url).set(password="s3cret-pw")
    # A wrong password must fail without printing it (the server may trust local connections: then it works).
    try:
        main(["db", "current", "--database-url", url.render_as_string(hide_password=False)])
    except sa.exc.OperationalError as exc:
        assert "s3cret-pw" not in str(exc)
    captured = capsys.readouterr()
    assert "s3cret-pw" not in captured.out + captured.err
