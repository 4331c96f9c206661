"""Run `xidpipe` in a real pseudo-terminal of a given width, as a person at a terminal runs it."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass

_STYLE = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Screen:
    code: int
    lines: list[str]  # what the terminal shows, styling removed, one entry per written line
    stderr: str


def in_terminal(*args: str, columns: int, env: dict[str, str] | None = None, timeout: float = 60) -> Screen:
    """`xidpipe ARGS` with its standard output on a pseudo-terminal `columns` wide (`COLUMNS` set, as a
    shell sets it); standard error piped."""
    leader, follower = pty.openpty()
    run_env = {**os.environ, **(env or {}), "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "xidpipe.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=subprocess.PIPE, env=run_env)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"xidpipe {' '.join(args)} did not finish in {timeout} s"
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the other side closed: everything was read
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None and not select.select([leader], [], [], 0.2)[0]:
            break
    os.close(leader)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    code = proc.wait(timeout=timeout)
    text = _STYLE.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")
    return Screen(code, text.split("\n"), stderr)
