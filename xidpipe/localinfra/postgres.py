"""A throwaway PostgreSQL cluster on loopback, from the server binaries of the distribution
(`initdb`, `pg_ctl`): created in a temporary directory, started on a free port, deleted on stop.

PostgreSQL refuses to run as root. When we are root, the cluster belongs to a dedicated
unprivileged system user (`xidpipe-pg`, created with `useradd --system` if absent) and every server
command runs through `runuser -u xidpipe-pg`. Clients connect over TCP with trust authentication
as the role `xidpipe`, so they need no OS user of their own.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from xidpipe.localinfra.process import (
    LOOPBACK,
    LocalInfraError,
    RunRecord,
    free_port,
    log_tail,
    owns_pid,
    pid_alive,
    require_free_port,
    terminate,
    wait_until,
)

ROLE = "xidpipe"  # the superuser role initdb creates; clients log in as it
DATABASE = "xidpipe"
SYSTEM_USER = "xidpipe-pg"  # the OS user that owns the cluster when we run as root
SEARCH_GLOB = "/usr/lib/postgresql/*/bin"
INSTALL_HINT = "install the PostgreSQL server (`apt-get install postgresql`)"


def find_bin_dir() -> Path:
    """The directory holding `initdb` and `pg_ctl`: from PATH, else the newest major version
    under /usr/lib/postgresql (Debian keeps them off PATH)."""
    initdb = shutil.which("initdb")
    if initdb is not None and shutil.which("pg_ctl") is not None:
        return Path(initdb).resolve().parent
    candidates = [p for p in Path("/").glob(SEARCH_GLOB.lstrip("/")) if (p / "initdb").is_file()]

    def major(path: Path) -> int:
        version = path.parent.name
        return int(version) if version.isdigit() else -1

    if not candidates:
        raise LocalInfraError(f"initdb and pg_ctl not found on PATH or in {SEARCH_GLOB}: {INSTALL_HINT}")
    return max(candidates, key=major)


def ensure_system_user(name: str = SYSTEM_USER) -> pwd.struct_passwd:
    """The passwd entry of `name`, created as a locked system account without a home if absent."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    done = subprocess.run(
        [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", "--comment", "xidpipe throwaway PostgreSQL clusters", name],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    try:
        return pwd.getpwnam(name)  # exit 9 (name in use) means a parallel run created it: fine
    except KeyError:
        raise LocalInfraError(
            f"PostgreSQL cannot run as root and creating the system user {name!r} failed "
            f"(exit {done.returncode}): {done.stderr.strip()}; create it or run as a normal user"
        ) from None


class LocalPostgres:
    """A throwaway PostgreSQL cluster on 127.0.0.1 with an empty database `xidpipe`.

    with LocalPostgres() as pg:
        engine = sqlalchemy.create_engine(pg.url)

    `port` 0 picks a free one. The cluster lives in `work_dir` (default: a new temporary
    directory): `data/` (with fsync off: the data is disposable), `postgres.log`, and the unix
    socket. `stop()` shuts it down (`pg_ctl stop -m fast`) and deletes the directory unless
    `keep_data`.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        work_dir: Path | None = None,
        keep_data: bool = False,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self._requested_port = port
        self._requested_work_dir = work_dir
        self.keep_data = keep_data
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port = 0
        self.pid = 0
        self.started_at = 0.0
        # Measured on start: initdb, then pg_ctl start through to the database being created.
        self.initdb_seconds = 0.0
        self.ready_seconds = 0.0
        self._work_dir: Path | None = None
        self._bin: Path | None = None
        self._run_as: str | None = None

    # -- what a caller needs ------------------------------------------------------------------
    @property
    def url(self) -> str:
        """SQLAlchemy URL of the `xidpipe` database (psycopg 3 driver)."""
        return f"postgresql+psycopg://{ROLE}@{LOOPBACK}:{self._started_port()}/{DATABASE}"

    @property
    def work_dir(self) -> Path:
        if self._work_dir is None:
            raise LocalInfraError("the PostgreSQL cluster is not started")
        return self._work_dir

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "postgres.log"

    def record(self) -> RunRecord:
        return RunRecord(
            service="postgres",
            pid=self.pid,
            address=self.url,
            work_dir=str(self.work_dir),
            log_file=str(self.log_file),
            keep_data=self.keep_data,
            started_at=self.started_at,
            ready_seconds=round(self.initdb_seconds + self.ready_seconds, 2),
        )

    def _started_port(self) -> int:
        if not self.port:
            raise LocalInfraError("the PostgreSQL cluster is not started")
        return self.port

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> LocalPostgres:
        if self.pid:
            raise LocalInfraError(f"the PostgreSQL cluster is already running (pid {self.pid})")
        self._bin = find_bin_dir()
        owner = ensure_system_user() if os.geteuid() == 0 else None
        self._run_as = owner.pw_name if owner is not None else None
        port = self._requested_port or free_port()
        require_free_port(port, "PostgreSQL")

        self._work_dir = self._make_work_dir(owner)
        try:
            self._initdb(port)
            began = time.monotonic()
            self._pg_ctl_start()
            self.pid = _postmaster_pid(self.data_dir)
            self.port = port
            self.started_at = time.time()
            self._create_database()
            self.ready_seconds = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Fast shutdown (disconnects clients, no checkpoint wait), then delete the directory.
        Kills the postmaster by PID if pg_ctl cannot stop it. Safe to call twice."""
        work_dir, self._work_dir = self._work_dir, None
        if work_dir is None:
            return
        if (work_dir / "data" / "postmaster.pid").exists() and self._bin is not None:
            pid = self.pid or _postmaster_pid(work_dir / "data", missing_ok=True)
            _pg_ctl_stop(self._bin, work_dir / "data", self._run_as, pid, self.stop_timeout)
        if not self.keep_data:
            shutil.rmtree(work_dir, ignore_errors=True)
        self.pid = 0
        self.port = 0

    # -- steps ----------------------------------------------------------------------------------
    def _make_work_dir(self, owner: pwd.struct_passwd | None) -> Path:
        if self._requested_work_dir is None:
            work = Path(tempfile.mkdtemp(prefix="xidpipe-pg-"))
        else:
            work = self._requested_work_dir
            work.mkdir(parents=True, exist_ok=True)
        # The unix socket lives here too: its path must stay under 107 bytes.
        if len(str(work / ".s.PGSQL.65535")) > 100:
            shutil.rmtree(work, ignore_errors=True)
            raise LocalInfraError(f"{work} is too long a path for a unix socket; use a shorter TMPDIR")
        if owner is not None:
            os.chown(work, owner.pw_uid, owner.pw_gid)
            os.chmod(work, 0o700)
            probe = subprocess.run(self._as_owner(["test", "-w", str(work)]), check=False)
            if probe.returncode != 0:
                shutil.rmtree(work, ignore_errors=True)
                raise LocalInfraError(
                    f"user {owner.pw_name} cannot reach {work} (a parent directory is private); "
                    "point TMPDIR at a world-traversable directory such as /tmp"
                )
        return work

    def _as_owner(self, command: Sequence[str]) -> list[str]:
        if self._run_as is None:
            return list(command)
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        return [runuser, "-u", self._run_as, "--", *command]

    def _run(self, what: str, command: Sequence[str], timeout: float) -> None:
        try:
            done = subprocess.run(
                self._as_owner(command),
                cwd=self.work_dir,  # the owner may not be allowed into our current directory
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LocalInfraError(
                f"{what} did not finish in {timeout:.0f} s; the server log ends with:\n"
                f"{log_tail(self.log_file)}"
            ) from exc
        if done.returncode != 0:
            output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            server_log = log_tail(self.log_file) if self.log_file.exists() else ""
            raise LocalInfraError(
                f"{what} failed (exit {done.returncode}):\n{output}"
                + (f"\nthe server log ends with:\n{server_log}" if server_log else "")
            )

    def _initdb(self, port: int) -> None:
        assert self._bin is not None
        began = time.monotonic()
        self._run(
            "initdb",
            [str(self._bin / "initdb"), "-D", str(self.data_dir), "-A", "trust", "-U", ROLE,
             "-E", "UTF8", "--locale=C", "--no-sync"],
            timeout=self.start_timeout,
        )  # fmt: skip
        self.initdb_seconds = time.monotonic() - began
        settings = {
            "listen_addresses": f"'{LOOPBACK}'",
            "port": str(port),
            "unix_socket_directories": f"'{self.work_dir}'",
            # Disposable data: skip every flush to disk.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "100",
            "timezone": "'UTC'",
        }
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# xidpipe.localinfra: throwaway test cluster\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _pg_ctl_start(self) -> None:
        assert self._bin is not None
        self._run(
            "pg_ctl start",
            [str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
             "-w", "-t", str(int(self.start_timeout)), "start"],
            timeout=self.start_timeout + 10,
        )  # fmt: skip

    def _create_database(self) -> None:
        import psycopg

        conninfo = f"postgresql://{ROLE}@{LOOPBACK}:{self.port}/postgres"
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
        except psycopg.Error as exc:
            raise LocalInfraError(
                f"cannot create database {DATABASE} at {conninfo}: {exc}; the server log ends with:\n"
                f"{log_tail(self.log_file)}"
            ) from exc


def stop_recorded(record: RunRecord, *, grace: float = 30.0) -> bool:
    """Stop a cluster that `xidpipe dev postgres start` left running; True when one was stopped.
    Only a postmaster whose command line names the recorded data directory is signalled."""
    data_dir = Path(record.work_dir) / "data"
    stopped = False
    if owns_pid(record.pid, "postgres", str(data_dir)):
        run_as = SYSTEM_USER if os.geteuid() == 0 else None
        try:
            bin_dir = find_bin_dir()
        except LocalInfraError:
            terminate(record.pid, grace=grace)
        else:
            _pg_ctl_stop(bin_dir, data_dir, run_as, record.pid, grace)
        stopped = True
    if not record.keep_data:
        shutil.rmtree(record.work_dir, ignore_errors=True)
    return stopped


def record_alive(record: RunRecord) -> bool:
    return owns_pid(record.pid, "postgres", str(Path(record.work_dir) / "data"))


def _pg_ctl_stop(bin_dir: Path, data_dir: Path, run_as: str | None, pid: int, timeout: float) -> None:
    pg_ctl = str(bin_dir / "pg_ctl")
    command = [pg_ctl, "-D", str(data_dir), "-m", "fast", "-w", "-t", str(int(timeout)), "stop"]
    if run_as is not None:
        command = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", run_as, "--", *command]
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(command, cwd=data_dir.parent, capture_output=True, timeout=timeout + 10, check=False)
    # pg_ctl returns once postmaster.pid is gone; make sure the process is too.
    if pid and not wait_until(lambda: not pid_alive(pid), 5.0):
        terminate(pid, grace=5.0)


def _postmaster_pid(data_dir: Path, *, missing_ok: bool = False) -> int:
    try:
        first_line = (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
    except OSError as exc:
        if missing_ok:
            return 0
        raise LocalInfraError(f"no postmaster.pid in {data_dir} after pg_ctl start") from exc
    match = re.fullmatch(r"\s*(\d+)\s*", first_line)
    if match is None:
        if missing_ok:
            return 0
        raise LocalInfraError(f"unreadable postmaster.pid in {data_dir}: {first_line!r}")
    return int(match.group(1))
