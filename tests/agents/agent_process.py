"""Run `xidpipe agent` as a child process (so it can be SIGKILLed) and read its /metrics."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.polling import poll


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AgentProcess:
    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.metrics_port = free_port()
        self.args = [sys.executable, "-m", "xidpipe.cli", "agent", *args, "--metrics-port", str(self.metrics_port)]
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=log, env=self.env)
        log.close()
        self.wait_metric("xidpipe_agent_kernel_lines_read_total", lambda v: v >= 0, timeout_s=30)
        return self

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+) ([0-9.e+-]+)$", text, re.M)}

    def wait_metric(self, name: str, ok: object, timeout_s: float = 60.0) -> float:
        def value() -> tuple[float] | None:
            try:
                last = self.metrics().get(name)
            except OSError:
                return None
            return (last,) if last is not None and ok(last) else None  # type: ignore[operator]

        return poll(f"{name} to pass its check", value, timeout_s, self)[0]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text()[-3000:]
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode or 0)
