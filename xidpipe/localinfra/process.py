"""Process plumbing shared by the local services: free ports, PID files, run records, stopping a
process by PID without touching one that merely reused the number."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


class LocalInfraError(RuntimeError):
    """A local service could not be fetched, started or stopped; the message says what to do."""


_PROC_READ_MAX = 64 * 1024  # bytes read of a /proc file

def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on `host` right now (the kernel's pick; another process may still
    take it before we bind, which start-up then reports as a busy port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


def require_free_port(port: int, what: str, host: str = LOOPBACK) -> None:
    if port_in_use(port, host):
        raise LocalInfraError(
            f"{what}: port {port} on {host} is already in use; stop whatever holds it "
            f"(`ss -ltnp 'sport = :{port}'`) or pick another port (0 picks a free one)"
        )


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll `predicate` until it is true or `timeout` seconds have passed; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True while `pid` names a process that has not exited (a zombie counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:  # bounded: a command name is 16 bytes, the rest numbers
            stat = fh.read(_PROC_READ_MAX).decode(errors="replace")
    except OSError:
        return False
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def process_cmdline(pid: int) -> list[str]:
    """The argument vector of `pid`, or [] when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:  # bounded: a process chooses its own argv
            raw = fh.read(_PROC_READ_MAX)
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def owns_pid(pid: int, *markers: str) -> bool:
    """True when `pid` is alive and its command line contains every marker: a PID file can outlive
    its process, and the kernel may have handed the number to something else since."""
    if not pid_alive(pid):
        return False
    cmdline = " ".join(process_cmdline(pid))
    return all(marker in cmdline for marker in markers)


def terminate(pid: int, *, grace: float, reap: Callable[[float], bool] | None = None) -> None:
    """SIGTERM `pid`, wait up to `grace` seconds, then SIGKILL and wait until it is gone.

    `reap(timeout)` waits for our own child (so it does not linger as a zombie) and returns True
    once it has exited; without it, exit is observed through /proc.
    """

    def gone(timeout: float) -> bool:
        if reap is not None:
            return reap(timeout)
        return wait_until(lambda: not pid_alive(pid), timeout)

    for sig, timeout in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            gone(1.0)
            return
        if gone(timeout):
            return
    raise LocalInfraError(f"process {pid} is still alive 10 s after SIGKILL")


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"(empty log at {path})"


def log_excerpt(path: Path, tail: int = 25, errors: int = 8) -> str:
    """The first error lines of a log (the cause usually comes before the shutdown noise), then
    its last lines."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    flagged = [line for line in lines if _ERROR_LINE.search(line)][:errors]
    excerpt = f"last lines:\n{log_tail(path, tail)}"
    return f"first errors:\n{chr(10).join(flagged)}\n{excerpt}" if flagged else excerpt


_ERROR_LINE = re.compile(r"\b(ERROR|FATAL)\b|Exception\b|Error\b")


def write_pid_file(path: Path, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{pid}\n")
    tmp.replace(path)


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What `xidpipe dev <service> start` leaves in the state directory so that `stop` and
    `status` in a later process can find the service: written as <state dir>/<service>.json."""

    service: str
    pid: int
    address: str  # Kafka: the bootstrap servers; PostgreSQL: the SQLAlchemy URL
    work_dir: str  # the service's throwaway directory (data, config, log)
    log_file: str
    keep_data: bool
    started_at: float  # Unix time
    ready_seconds: float

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> RunRecord | None:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            return cls(**data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            raise LocalInfraError(f"unreadable run record {path}: {exc}; delete it if nothing runs") from exc


def remove_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
