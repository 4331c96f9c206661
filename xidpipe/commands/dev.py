"""`xidpipe dev`: the local services for development, tests and the demo, without Docker.

    xidpipe dev kafka fetch                  # Kafka 4.0.2 jars from Maven Central into the cache
    xidpipe dev kafka start|stop|status      # a single-node KRaft broker on 127.0.0.1
    xidpipe dev postgres start|stop|status   # a throwaway PostgreSQL cluster on 127.0.0.1
    xidpipe dev compose-secrets DIR          # docker-compose's passwords, made once (its `secrets` service)

`start` leaves the service running in the background and prints its address on stdout (the
bootstrap servers, or a SQLAlchemy URL), so `export XIDPIPE_TEST_KAFKA=$(xidpipe dev kafka start)`
works. The state directory keeps `<service>.pid` and `<service>.json` (PID, address, work
directory) so that `stop` and `status` find the service from any later shell.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from xidpipe.commands.exits import EXIT_UNAVAILABLE
from xidpipe.localinfra import kafka, postgres
from xidpipe.localinfra.process import LocalInfraError, RunRecord, remove_file, write_pid_file

DEFAULT_STATE_DIR = Path("var") / "dev"
STATE_DIR_ENV = "XIDPIPE_STATE_DIR"
EXIT_NOT_RUNNING = EXIT_UNAVAILABLE  # `status` of a stopped service (3, as LSB init scripts report it too)

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = subparsers.add_parser(
        "dev",
        help="run local Kafka and PostgreSQL for development and tests",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    services = dev.add_subparsers(dest="service", metavar="SERVICE", required=True)

    kafka_parser = services.add_parser(
        "kafka",
        help=f"a single-node Apache Kafka {kafka.KAFKA_VERSION} broker (KRaft) from Maven Central jars",
        description=f"A single-node Apache Kafka {kafka.KAFKA_VERSION} broker (KRaft, broker and "
        "controller in one JVM) on 127.0.0.1, started from jars that `fetch` copies from Maven Central.",
    )
    kafka_actions = kafka_parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    fetch = kafka_actions.add_parser(
        "fetch",
        help="copy the Kafka jars from Maven Central into the cache (needs mvn)",
        description="Copy the Kafka jars and their runtime dependencies from Maven Central into "
        f"the cache (default {kafka.cache_dir()}; set XIDPIPE_CACHE to move it). Does nothing "
        "when they are already there. Prints the jar directory.",
    )
    fetch.add_argument("--cache", type=Path, default=None, help="cache directory for this Kafka version")
    fetch.add_argument("--force", action="store_true", help="fetch again even when the jars are present")
    fetch.set_defaults(func=_kafka_fetch)

    start = kafka_actions.add_parser(
        "start",
        help="start the broker in the background and print its bootstrap servers",
        description="Format a throwaway data directory, start the broker in the background, wait "
        "until it answers, and print its bootstrap servers (127.0.0.1:PORT) on stdout. Prints the "
        "running broker's address instead if one is already recorded in the state directory.",
    )
    _add_state_dir(start)
    start.add_argument("--port", type=int, default=0, help="listener port (default 0: a free one)")
    start.add_argument(
        "--partitions", type=int, default=1, help="num.partitions for auto-created topics (default 1)"
    )
    start.add_argument("--keep-data", action="store_true", help="keep the data directory after stop")
    start.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for readiness (default 60)"
    )
    start.set_defaults(func=_kafka_start)
    _add_stop_status(kafka_actions, "kafka", "broker")

    secrets_parser = services.add_parser(
        "compose-secrets",
        help="make the docker-compose stack's passwords once, into DIR",
        description="Make the PostgreSQL password of docker-compose.yml (DIR/postgres-password) and its libpq "
        "password file (DIR/pgpass), both mode 0600, unless they exist; docker-compose's `secrets` service runs "
        "this at every start, into the git-ignored secrets/ directory. Prints the directory, never a password.",
    )
    secrets_parser.add_argument("directory", metavar="DIR", type=Path)
    secrets_parser.add_argument("--pgpass-owner", metavar="UID:GID", default=None,
                                help="give DIR/pgpass to this user and group (the services' user; needs root)")
    secrets_parser.set_defaults(func=_compose_secrets)

    pg_parser = services.add_parser(
        "postgres",
        help="a throwaway PostgreSQL cluster from the installed server binaries",
        description="A throwaway PostgreSQL cluster on 127.0.0.1 (initdb and pg_ctl from PATH or "
        f"{postgres.SEARCH_GLOB}) with trust authentication, role and database `xidpipe`. Run as "
        f"root, the cluster belongs to the system user {postgres.SYSTEM_USER}.",
    )
    pg_actions = pg_parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    pg_start = pg_actions.add_parser(
        "start",
        help="create and start a cluster in the background and print its SQLAlchemy URL",
        description="Create a cluster in a temporary directory, start it in the background, create "
        "the database `xidpipe`, and print its SQLAlchemy URL on stdout. Prints the running "
        "cluster's URL instead if one is already recorded in the state directory.",
    )
    _add_state_dir(pg_start)
    pg_start.add_argument("--port", type=int, default=0, help="TCP port (default 0: a free one)")
    pg_start.add_argument("--keep-data", action="store_true", help="keep the cluster directory after stop")
    pg_start.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the server (default 60)"
    )
    pg_start.set_defaults(func=_postgres_start)
    _add_stop_status(pg_actions, "postgres", "cluster")


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"where the PID and run-record files live (default: ${STATE_DIR_ENV}, else "
        f"{DEFAULT_STATE_DIR}/ under the current directory)",
    )


def _add_stop_status(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], service: str, noun: str
) -> None:
    stop = actions.add_parser(
        "stop",
        help=f"stop the background {noun} by PID and delete its data",
        description=f"Stop the {noun} recorded in the state directory by its PID and delete its "
        "directory (unless it was started with --keep-data). Succeeds when nothing runs.",
    )
    _add_state_dir(stop)
    stop.set_defaults(func=_stop_handler(service))
    status = actions.add_parser(
        "status",
        help=f"show whether the background {noun} runs (exit 0) or not (exit {EXIT_NOT_RUNNING})",
        description=f"Print the recorded {noun}'s PID, address and log. Exit status 0 when it runs, "
        f"{EXIT_NOT_RUNNING} when it does not.",
    )
    _add_state_dir(status)
    status.set_defaults(func=_status_handler(service))


# -- handlers -------------------------------------------------------------------------------------
def state_dir(args: argparse.Namespace) -> Path:
    chosen: Path | None = args.state_dir
    if chosen is None:
        chosen = Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)
    return chosen.expanduser().absolute()


def _paths(args: argparse.Namespace, service: str) -> tuple[Path, Path]:
    base = state_dir(args)
    return base / f"{service}.json", base / f"{service}.pid"


def _compose_secrets(args: argparse.Namespace) -> int:
    from xidpipe.localinfra.compose_secrets import ensure_compose_secrets

    owner = None
    if args.pgpass_owner:
        uid, _, gid = args.pgpass_owner.partition(":")
        if not (uid.isdigit() and gid.isdigit()):
            return _fail("compose-secrets", ValueError(f"--pgpass-owner must be UID:GID, not {args.pgpass_owner!r}"))
        owner = (int(uid), int(gid))
    try:
        directory, made = ensure_compose_secrets(args.directory, owner)
    except (OSError, ValueError) as exc:
        return _fail("compose-secrets", exc)
    _info(f"{'made' if made else 'kept'} the PostgreSQL password in {directory} (postgres-password, pgpass)")
    print(directory)
    return 0


def _kafka_fetch(args: argparse.Namespace) -> int:
    try:
        lib = kafka.fetch(args.cache, force=args.force)
    except LocalInfraError as exc:
        return _fail("kafka fetch", exc)
    print(lib)
    return 0


def _kafka_start(args: argparse.Namespace) -> int:
    record_path, pid_path = _paths(args, "kafka")
    running = _running_record("kafka", record_path, pid_path)
    if running is not None:
        _info(f"kafka already running: pid {running.pid}, log {running.log_file}")
        print(running.address)
        return 0
    broker = kafka.LocalKafka(
        port=args.port,
        num_partitions=args.partitions,
        pid_file=pid_path,
        keep_data=args.keep_data,
        ready_timeout=args.timeout,
        die_with_parent=False,
    )
    try:
        broker.start()
    except (LocalInfraError, ValueError) as exc:
        return _fail("kafka start", exc)
    record = broker.record()
    record.write(record_path)
    _info(
        f"kafka {kafka.KAFKA_VERSION} ready in {record.ready_seconds:.1f} s: pid {record.pid}, "
        f"data {broker.data_dir}, log {record.log_file}; stop it with `xidpipe dev kafka stop`"
    )
    print(record.address)
    return 0


def _postgres_start(args: argparse.Namespace) -> int:
    record_path, pid_path = _paths(args, "postgres")
    running = _running_record("postgres", record_path, pid_path)
    if running is not None:
        _info(f"postgres already running: pid {running.pid}, log {running.log_file}")
        print(running.address)
        return 0
    cluster = postgres.LocalPostgres(port=args.port, keep_data=args.keep_data, start_timeout=args.timeout)
    try:
        cluster.start()
    except LocalInfraError as exc:
        return _fail("postgres start", exc)
    record = cluster.record()
    write_pid_file(pid_path, record.pid)
    record.write(record_path)
    _info(
        f"postgres ready in {record.ready_seconds:.1f} s: pid {record.pid}, data {cluster.data_dir}, "
        f"log {record.log_file}; stop it with `xidpipe dev postgres stop`"
    )
    print(record.address)
    return 0


def _stop_handler(service: str) -> Handler:
    def stop(args: argparse.Namespace) -> int:
        record_path, pid_path = _paths(args, service)
        try:
            record = RunRecord.read(record_path)
            stopped = record is not None and _stop_recorded(record)
        except LocalInfraError as exc:
            return _fail(f"{service} stop", exc)
        remove_file(record_path)
        remove_file(pid_path)
        if record is not None and stopped:
            print(f"{service} stopped (pid {record.pid})")
        else:
            print(f"{service} was not running")
        return 0

    return stop


def _status_handler(service: str) -> Handler:
    def status(args: argparse.Namespace) -> int:
        record_path, pid_path = _paths(args, service)
        try:
            record = _running_record(service, record_path, pid_path)
        except LocalInfraError as exc:
            return _fail(f"{service} status", exc)
        if record is None:
            print(f"{service}: not running (state dir {state_dir(args)})")
            return EXIT_NOT_RUNNING
        uptime = time.time() - record.started_at
        print(f"{service}: running, pid {record.pid}, up {uptime:.0f} s")
        print(f"address: {record.address}")
        print(f"work dir: {record.work_dir}")
        print(f"log: {record.log_file}")
        return 0

    return status


def _stop_recorded(record: RunRecord) -> bool:
    if record.service == "kafka":
        return kafka.stop_recorded(record)
    return postgres.stop_recorded(record)


def _running_record(service: str, record_path: Path, pid_path: Path) -> RunRecord | None:
    """The recorded service if it still runs; a stale record (the process died or the machine
    rebooted) is cleaned up, its leftover directory included."""
    record = RunRecord.read(record_path)
    if record is None:
        return None
    alive = kafka.record_alive(record) if service == "kafka" else postgres.record_alive(record)
    if alive:
        return record
    _stop_recorded(record)
    remove_file(record_path)
    remove_file(pid_path)
    return None


def _info(message: str) -> None:
    print(message, file=sys.stderr)


def _fail(what: str, exc: Exception) -> int:
    """A local service that could not be fetched, started, stopped or read: a dependency unavailable."""
    print(f"xidpipe dev {what}: {exc}", file=sys.stderr)
    return EXIT_UNAVAILABLE
