"""The local PostgreSQL server: SQLAlchemy against the real server, and a cluster that goes away."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.services import service_unavailable
from xidpipe.localinfra.postgres import SYSTEM_USER, LocalPostgres, find_bin_dir
from xidpipe.localinfra.process import LocalInfraError, pid_alive, process_cmdline

pytestmark = pytest.mark.postgres


def test_sqlalchemy_create_insert_select(postgres_url: str) -> None:
    metadata = sa.MetaData()
    gpus = sa.Table(
        f"gpu_{uuid.uuid4().hex[:12]}",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uuid", sa.String(64), nullable=False, unique=True),
        sa.Column("note", sa.Text),
        sa.Column("labels", sa.JSON),
        sa.Column("seen_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
    )
    engine = sa.create_engine(postgres_url)
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(
                gpus.insert(),
                [
                    {"uuid": "GPU-1", "note": "Xid 79: 从总线掉卡", "labels": {"xid": 79}},
                    {"uuid": "GPU-2", "note": None, "labels": {"xid": 13, "pod": "train-0"}},
                ],
            )
        with engine.begin() as conn, pytest.raises(sa.exc.IntegrityError):
            conn.execute(gpus.insert(), {"uuid": "GPU-1"})  # the unique constraint is the server's
        with engine.connect() as conn:
            rows = conn.execute(sa.select(gpus.c.uuid, gpus.c.note, gpus.c.labels).order_by(gpus.c.id)).all()
            assert conn.dialect.name == "postgresql"
            assert conn.execute(sa.text("SHOW server_encoding")).scalar() == "UTF8"
            tz_aware = conn.execute(sa.select(gpus.c.seen_at)).scalars().first()
        assert [tuple(r) for r in rows] == [
            ("GPU-1", "Xid 79: 从总线掉卡", {"xid": 79}),
            ("GPU-2", None, {"xid": 13, "pod": "train-0"}),
        ]
        assert tz_aware is not None and tz_aware.tzinfo is not None
    finally:
        metadata.drop_all(engine)
        engine.dispose()


def test_each_postgres_database_is_separate(postgres_url: str, postgres_database: str) -> None:
    assert sa.make_url(postgres_database).database != sa.make_url(postgres_url).database
    isolated = sa.create_engine(postgres_database)
    shared = sa.create_engine(postgres_url)
    try:
        with isolated.begin() as conn:
            conn.execute(sa.text("CREATE TABLE only_here (x int)"))
        with shared.connect() as conn:
            assert conn.execute(sa.text("SELECT to_regclass('only_here')")).scalar() is None
    finally:
        isolated.dispose()
        shared.dispose()


def test_stop_removes_the_cluster() -> None:
    try:
        cluster = LocalPostgres().start()
    except LocalInfraError as exc:
        service_unavailable("PostgreSQL", str(exc))
    pid, work_dir, url = cluster.pid, cluster.work_dir, cluster.url
    try:
        assert (work_dir / "data" / "PG_VERSION").is_file()
        assert any("postgres" in part for part in process_cmdline(pid))
        if os.geteuid() == 0:  # the server never runs as root
            assert work_dir.stat().st_uid == pwd.getpwnam(SYSTEM_USER).pw_uid
            with open(f"/proc/{pid}/status") as status:
                uid_line = next(line for line in status if line.startswith("Uid:"))
            assert int(uid_line.split()[1]) == pwd.getpwnam(SYSTEM_USER).pw_uid
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT current_database(), current_user")).one() == ("xidpipe", "xidpipe")
            assert conn.execute(sa.text("SHOW listen_addresses")).scalar() == "127.0.0.1"
            assert conn.execute(sa.text("SHOW fsync")).scalar() == "off"
        engine.dispose()
    finally:
        cluster.stop()
    assert not pid_alive(pid)
    assert not work_dir.exists()
    gone = sa.create_engine(url, connect_args={"connect_timeout": 3})
    try:
        with pytest.raises(sa.exc.OperationalError):
            gone.connect()
    finally:
        gone.dispose()
    cluster.stop()  # a second stop is harmless


def test_cli_start_status_stop_leaves_nothing_running(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def dev(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "xidpipe.cli", "dev", "postgres", *args, "--state-dir", str(state)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    started = dev("start")
    if started.returncode != 0:
        service_unavailable("PostgreSQL", started.stderr.strip())
    url = started.stdout.strip()
    record = json.loads((state / "postgres.json").read_text())
    pid = int((state / "postgres.pid").read_text())
    try:
        assert url.startswith("postgresql+psycopg://xidpipe@127.0.0.1:") and url.endswith("/xidpipe")
        assert record["pid"] == pid and record["address"] == url
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            # Still serving after the command that started it has exited.
            assert conn.execute(sa.text("SELECT current_database()")).scalar() == "xidpipe"
        engine.dispose()
        status = dev("status")
        assert status.returncode == 0 and url in status.stdout
    finally:
        stopped = dev("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not pid_alive(pid)
    assert not Path(record["work_dir"]).exists()
    assert dev("status").returncode == 3


def test_busy_port_is_reported_before_anything_starts(tmp_path: Path) -> None:
    import socket

    try:
        find_bin_dir()
    except LocalInfraError as exc:
        service_unavailable("PostgreSQL", str(exc))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        with pytest.raises(LocalInfraError, match=rf"port {busy} on 127.0.0.1 is already in use"):
            LocalPostgres(port=busy, work_dir=tmp_path / "cluster").start()
    assert not (tmp_path / "cluster").exists()
