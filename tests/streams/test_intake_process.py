"""The store process of a worker that is pid 1, as the first process of its container is."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import asyncio, os, sys
from streams.intake_process import IntakeProcess

async def main() -> None:
    store = IntakeProcess(sys.argv[1], process=True)
    try:
        await store.start()
        await store.create_schema()
    finally:
        store.close()
    print("pid", os.getpid(), "store ok")

asyncio.run(main())
"""


def pid_namespace() -> list[str]:
    """The command prefix that runs a process as pid 1 of a new PID namespace, or a skip."""
    cmd = ["unshare", "--user", "--map-root-user", "--pid", "--fork"]
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run([*cmd, sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, timeout=60, check=False)
    if probe.returncode != 0 or probe.stdout.strip() != "1":
        pytest.skip(f"no user and PID namespaces here: {probe.stderr.strip()[:200]}")
    return cmd


def test_the_store_process_of_a_worker_that_is_pid_1_starts(tmp_path: Path) -> None:
    done = subprocess.run([*pid_namespace(), sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path / 'h.db'}"],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0 and "pid 1 store ok" in done.stdout, done.stdout + done.stderr[-3000:]
    assert (tmp_path / "h.db").is_file()
