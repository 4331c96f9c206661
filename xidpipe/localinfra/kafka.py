"""A single-node Apache Kafka 4.0.2 broker (KRaft, combined broker and controller) on loopback,
run from the Maven Central jars: no Docker, no Kafka distribution tarball.

`fetch()` copies the jars (about 45 MB) into a cache outside the source tree, once.
`LocalKafka` formats a throwaway data directory, starts `kafka.Kafka` on free ports, waits until
the broker answers an admin request, and on stop kills it by PID and deletes the directory.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

from xidpipe.localinfra import kafka_security as sec
from xidpipe.localinfra.process import (
    LOOPBACK,
    LocalInfraError,
    RunRecord,
    free_port,
    log_excerpt,
    owns_pid,
    remove_file,
    require_free_port,
    terminate,
    wait_until,
    write_pid_file,
)

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.0.2"
SCALA_BINARY_VERSION = "2.13"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"
FETCH_HINT = "run `xidpipe dev kafka fetch` (or `make kafka-jars`)"

# The broker's heap: 256 MB at start, 512 MB at most, plenty for tests and the demo (default 1 GB).
BROKER_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms256m",
    "-Xmx512m",
    # The flags kafka-run-class.sh sets for the broker.
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
# The storage tool runs for a second or two: skip the optimising JIT and G1's start-up cost.
TOOL_JVM_OPTIONS: tuple[str, ...] = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def cache_dir() -> Path:
    """Where the jars live: `$XIDPIPE_CACHE/kafka-4.0.2`, else `$XDG_CACHE_HOME/xidpipe/...`,
    else `~/.cache/xidpipe/kafka-4.0.2`. Outside the source tree, shared by every checkout."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xidpipe"
    base = Path(os.environ.get("XIDPIPE_CACHE") or default)
    return base.expanduser() / f"kafka-{KAFKA_VERSION}"


def jars_complete(lib: Path) -> bool:
    """The broker jar and the Scala runtime are the last to matter and the first to be missed."""
    main_jar = lib / f"kafka_{SCALA_BINARY_VERSION}-{KAFKA_VERSION}.jar"
    return main_jar.is_file() and any(lib.glob("scala-library-*.jar"))


def fetch(cache: Path | None = None, *, force: bool = False) -> Path:
    """Copy Kafka and its runtime dependencies from Maven Central into `<cache>/lib`; return it.

    Does nothing when the jars are already there (unless `force`). Maven writes into
    `lib.partial` first, so an interrupted fetch never looks complete.
    """
    cache = cache or cache_dir()
    lib = cache / "lib"
    if not force and jars_complete(lib):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalInfraError("mvn not found on PATH: install Maven 3 (`apt-get install maven`)")
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".fetch.lock"):
        if not force and jars_complete(lib):  # another process fetched while we waited
            return lib
        pom = cache / "pom.xml"
        pom.write_text(_package_text("pom.xml"))
        partial = cache / "lib.partial"
        shutil.rmtree(partial, ignore_errors=True)
        command = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={partial}",
        ]  # fmt: skip
        log.info("fetching Kafka %s jars: %s", KAFKA_VERSION, " ".join(command))
        done = subprocess.run(command, cwd=cache, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
            raise LocalInfraError(
                f"mvn could not fetch Kafka {KAFKA_VERSION} (exit {done.returncode}); is Maven Central "
                f"reachable (proxy settings in ~/.m2/settings.xml)?\n{output}"
            )
        if not jars_complete(partial):
            raise LocalInfraError(f"mvn finished but {partial} lacks the kafka_2.13 or scala-library jar")
        shutil.rmtree(lib, ignore_errors=True)
        partial.rename(lib)
    return lib


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise LocalInfraError(
            "java not found: Kafka 4 needs Java 17 or newer on PATH or in JAVA_HOME "
            "(`apt-get install openjdk-17-jre-headless`)"
        )
    return java


def new_cluster_id() -> str:
    """A KRaft cluster id as `kafka-storage random-uuid` prints it (URL-safe base64 of 16 random
    bytes, no padding, never starting with '-'), without starting a JVM for it."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class LocalKafka:
    """A throwaway single-node Kafka broker on 127.0.0.1.

    with LocalKafka() as kafka:
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)

    `port`/`controller_port` 0 pick free ports. `work_dir` (default: a new temporary directory)
    holds server.properties, the data (`data/`), the broker log (`kafka.log`) and, unless
    `pid_file` says otherwise, `kafka.pid`; it is deleted on stop unless `keep_data`.
    `die_with_parent` makes the kernel SIGTERM the broker if this process dies without stopping
    it (through `setpriv --pdeathsig`); `xidpipe dev kafka start` turns it off.

    `scram_users` ({name: password}) starts it secured (`xidpipe.localinfra.kafka_security`): a
    SASL/SCRAM-SHA-512 listener (SASL_SSL with a throwaway CA when `tls`), those users created at
    format time, the StandardAuthorizer, and no rights for anyone but the `admin` super user until
    `grant` gives them; `client_options(user)` are a user's kafka-python options.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        controller_port: int = 0,
        num_partitions: int = 1,
        cache: Path | None = None,
        work_dir: Path | None = None,
        pid_file: Path | None = None,
        keep_data: bool = False,
        ready_timeout: float = 60.0,
        stop_timeout: float = 20.0,
        die_with_parent: bool = True,
        extra_properties: Mapping[str, str] | None = None,
        scram_users: Mapping[str, str] | None = None,
        tls: bool = False,
    ) -> None:
        if tls and scram_users is None:
            raise ValueError("tls needs scram_users: the TLS listener is the SASL_SSL one")
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        self._requested_port = port
        self._requested_controller_port = controller_port
        self.num_partitions = num_partitions
        self.lib = (cache or cache_dir()) / "lib"
        self._requested_work_dir = work_dir
        self._requested_pid_file = pid_file
        self.keep_data = keep_data
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.die_with_parent = die_with_parent
        self.extra_properties = dict(extra_properties or {})
        self.scram_users = dict(scram_users) if scram_users is not None else None
        self.tls = tls
        self._admin_password = sec.new_password()
        self._controller_password = sec.new_password()
        self._tls_files: sec.TlsFiles | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._work_dir: Path | None = None
        self.port = 0
        self.controller_port = 0
        self.started_at = 0.0
        # Measured on start: seconds to format the storage, and from broker launch to ready.
        self.format_seconds = 0.0
        self.ready_seconds = 0.0

    # -- what a caller needs ------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        if not self.port:
            raise LocalInfraError("the broker is not started")
        return f"{LOOPBACK}:{self.port}"

    @property
    def secured(self) -> bool:
        return self.scram_users is not None

    @property
    def ca_file(self) -> Path | None:
        """The throwaway CA clients trust (SASL_SSL), else None."""
        return self._tls_files.ca_file if self._tls_files else None

    def client_options(self, user: str) -> dict[str, Any]:
        """kafka-python security options of a SCRAM user (`admin`: the super user); {} when not secured."""
        if self.scram_users is None:
            return {}
        password = self._admin_password if user == sec.ADMIN_USER else self.scram_users[user]
        return sec.client_options(user, password, self.ca_file)

    def grant(self, grants: Iterable[sec.Grant]) -> int:
        """Create ACLs as the super user; returns how many."""
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="xidpipe-localinfra-acls",
                                 **self.client_options(sec.ADMIN_USER))
        try:
            return sec.create_acls(admin, grants)
        finally:
            admin.close()

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise LocalInfraError("the broker is not started")
        return self._proc.pid

    @property
    def work_dir(self) -> Path:
        if self._work_dir is None:
            raise LocalInfraError("the broker is not started")
        return self._work_dir

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "kafka.log"

    @property
    def pid_file(self) -> Path:
        return self._requested_pid_file or self.work_dir / "kafka.pid"

    def record(self) -> RunRecord:
        return RunRecord(
            service="kafka",
            pid=self.pid,
            address=self.bootstrap,
            work_dir=str(self.work_dir),
            log_file=str(self.log_file),
            keep_data=self.keep_data,
            started_at=self.started_at,
            ready_seconds=round(self.format_seconds + self.ready_seconds, 2),
        )

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> LocalKafka:
        if self._proc is not None:
            raise LocalInfraError(f"the broker is already running (pid {self._proc.pid})")
        java = find_java()
        if not jars_complete(self.lib):
            raise LocalInfraError(f"Kafka {KAFKA_VERSION} jars are missing from {self.lib}: {FETCH_HINT}")
        self.port = self._requested_port or free_port()
        self.controller_port = self._requested_controller_port or free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        require_free_port(self.port, "Kafka broker")
        require_free_port(self.controller_port, "Kafka controller")

        self._work_dir = self._make_work_dir()
        try:
            self._write_config()
            self._format(java)
            self._launch(java)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        log.info("Kafka %s ready at %s in %.1f s (pid %d)", KAFKA_VERSION, self.bootstrap,
                 self.format_seconds + self.ready_seconds, self.pid)  # fmt: skip
        return self

    def stop(self) -> None:
        """Stop the broker by PID (SIGTERM, SIGKILL after `stop_timeout`), remove the PID file and,
        unless `keep_data`, the work directory. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:

            def reap(timeout: float) -> bool:
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    return False
                return True

            terminate(proc.pid, grace=self.stop_timeout, reap=reap)
        if self._work_dir is not None:
            remove_file(self.pid_file)
            if not self.keep_data:
                shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None
        self.port = 0

    # -- steps ----------------------------------------------------------------------------------
    def _make_work_dir(self) -> Path:
        if self._requested_work_dir is None:
            return Path(tempfile.mkdtemp(prefix="xidpipe-kafka-"))
        self._requested_work_dir.mkdir(parents=True, exist_ok=True)
        return self._requested_work_dir

    def server_properties(self) -> dict[str, str]:
        """The broker configuration: single node, loopback only, tuned for fast tests."""
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            # Static voters: the storage is formatted without --standalone.
            "controller.quorum.voters": f"1@{LOOPBACK}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.num_partitions),
            "auto.create.topics.enable": "true",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            # One partition each instead of 50: the coordinators are ready sooner.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # A group's first member is assigned at once instead of after 3 s.
            "group.initial.rebalance.delay.ms": "0",
            # Lets tests use session timeouts below the 6 s default minimum.
            "group.min.session.timeout.ms": "1000",
            "log.retention.hours": "1",
        }
        if self.scram_users is not None:
            props.update(sec.secured_properties(
                port=self.port, controller_port=self.controller_port, host=LOOPBACK,
                admin_password=self._admin_password, controller_password=self._controller_password,
                tls=self._tls_files))
        props.update(self.extra_properties)
        return props

    def _write_config(self) -> None:
        if self.tls:
            self._tls_files = sec.make_tls(self.work_dir / "tls", LOOPBACK)
        lines = [f"{key}={value}" for key, value in self.server_properties().items()]
        config = self.work_dir / "server.properties"
        config.touch(mode=0o600)  # a secured broker's file holds its own passwords
        config.write_text("\n".join(lines) + "\n")
        (self.work_dir / "log4j2.properties").write_text(_package_text("log4j2.properties"))

    def _java_command(self, java: str, jvm_options: tuple[str, ...], main_class: str) -> list[str]:
        return [
            java,
            *jvm_options,
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.work_dir / 'logs'}",
            "-cp",
            f"{self.lib}/*",
            main_class,
        ]

    def _format(self, java: str) -> None:
        command = [
            *self._java_command(java, TOOL_JVM_OPTIONS, STORAGE_TOOL_CLASS),
            "format", "-t", new_cluster_id(), "-c", str(self.work_dir / "server.properties"),
        ]  # fmt: skip
        if self.scram_users is not None:
            command += sec.scram_arguments({sec.ADMIN_USER: self._admin_password, **self.scram_users})
        began = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired as exc:
            raise LocalInfraError("kafka.tools.StorageTool format did not finish in 120 s") from exc
        self.format_seconds = time.monotonic() - began
        if done.returncode != 0:
            output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
            raise LocalInfraError(
                f"formatting Kafka storage in {self.data_dir} failed (exit {done.returncode})"
                f"{_java_hint(output)}:\n{output}"
            )

    def _launch(self, java: str) -> None:
        command = self._java_command(java, BROKER_JVM_OPTIONS, MAIN_CLASS)
        command.append(str(self.work_dir / "server.properties"))
        setpriv = shutil.which("setpriv")
        if self.die_with_parent and setpriv is not None:
            # setpriv execs java, so the PID stays the broker's.
            command = [setpriv, "--pdeathsig", "TERM", *command]
        with self.log_file.open("ab") as out:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the broker
            )
        self.started_at = time.time()
        write_pid_file(self.pid_file, self._proc.pid)

    def _wait_ready(self) -> None:
        """Ready means the broker accepts connections and answers DescribeCluster with itself
        as an unfenced broker. Fails at once, with the broker's log, if the JVM exits."""
        began = time.monotonic()
        deadline = began + self.ready_timeout
        proc = self._proc
        assert proc is not None

        def exited() -> bool:
            return proc.poll() is not None

        def accepting() -> bool:
            if exited():
                return True
            with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, self.port), 0.5):
                return True
            return False

        wait_until(accepting, self.ready_timeout, 0.1)
        with _quiet_kafka_client_logs():
            while not exited():
                if self._answers_admin(timeout_ms=2000):
                    self.ready_seconds = time.monotonic() - began
                    return
                if time.monotonic() >= deadline:
                    raise LocalInfraError(
                        f"Kafka broker at {self.bootstrap} not ready after {self.ready_timeout:.0f} s; "
                        f"from its log (kafka.log):\n{log_excerpt(self.log_file)}"
                    )
                time.sleep(0.2)
        excerpt = log_excerpt(self.log_file)
        raise LocalInfraError(
            f"Kafka broker exited with status {proc.returncode} during start-up{_java_hint(excerpt)}; "
            f"from its log (kafka.log):\n{excerpt}"
        )

    def _answers_admin(self, timeout_ms: int) -> bool:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaConfigurationError, KafkaError

        try:
            admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap,
                client_id="xidpipe-localinfra-probe",
                request_timeout_ms=timeout_ms,
                bootstrap_timeout_ms=timeout_ms,
                **self.client_options(sec.ADMIN_USER),
            )
        except KafkaConfigurationError:
            raise
        except (KafkaError, OSError, ValueError):
            return False
        try:
            cluster = admin.describe_cluster()
        except (KafkaError, OSError, ValueError):
            return False
        finally:
            admin.close()
        brokers = cluster.get("brokers") or []
        return any(b.get("port") == self.port and not b.get("is_fenced") for b in brokers)


def stop_recorded(record: RunRecord, *, grace: float = 20.0) -> bool:
    """Stop a broker that `xidpipe dev kafka start` left running; True when one was stopped.

    The PID is only signalled if its command line is still our broker's (kafka.Kafka reading the
    recorded work directory's config), never a process that reused the number.
    """
    stopped = False
    if owns_pid(record.pid, MAIN_CLASS, record.work_dir):
        terminate(record.pid, grace=grace)
        stopped = True
    if not record.keep_data:
        shutil.rmtree(record.work_dir, ignore_errors=True)
    return stopped


def record_alive(record: RunRecord) -> bool:
    return owns_pid(record.pid, MAIN_CLASS, record.work_dir)


def _java_hint(output: str) -> str:
    if "UnsupportedClassVersionError" in output:
        return " (Kafka 4 needs Java 17 or newer: set JAVA_HOME to one)"
    if "Address already in use" in output:
        return " (a port is already in use: another process took it; start again)"
    return ""


def _package_text(name: str) -> str:
    return resources.files("xidpipe.localinfra").joinpath(name).read_text(encoding="utf-8")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _quiet_kafka_client_logs() -> Iterator[None]:
    """kafka-python logs every refused connection while the broker starts; that is expected."""
    logger = logging.getLogger("kafka")
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)
