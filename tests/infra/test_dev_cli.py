"""`xidpipe dev`: every command answers --help, and the state directory is handled without a
service running."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xidpipe.cli import build_parser, main
from xidpipe.localinfra.process import RunRecord

EXPECTED_COMMANDS = {
    ("dev",),
    ("dev", "kafka"),
    ("dev", "kafka", "fetch"),
    ("dev", "kafka", "start"),
    ("dev", "kafka", "stop"),
    ("dev", "kafka", "status"),
    ("dev", "postgres"),
    ("dev", "postgres", "start"),
    ("dev", "postgres", "stop"),
    ("dev", "postgres", "status"),
    ("dev", "compose-secrets"),
}


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                path = (*prefix, name)
                paths.add(path)
                paths |= _command_paths(child, path)
    return paths


def _dev_paths() -> set[tuple[str, ...]]:
    return {path for path in _command_paths(build_parser()) if path[0] == "dev"}


def test_dev_command_tree_is_the_documented_one() -> None:
    assert _dev_paths() == EXPECTED_COMMANDS


@pytest.mark.parametrize("path", sorted(_dev_paths()), ids=" ".join)
def test_help_works(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path, "--help"]) == 0  # main returns the exit status (it never raises SystemExit)
    out = capsys.readouterr().out
    assert out.startswith(f"usage: xidpipe {' '.join(path)}")


def test_help_through_the_installed_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "xidpipe.cli", "dev", "kafka", "start", "--help"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--state-dir" in done.stdout and "--partitions" in done.stdout


@pytest.mark.parametrize("service", ["kafka", "postgres"])
def test_status_and_stop_without_a_service(service: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev", service, "status", "--state-dir", str(tmp_path)]) == 3
    assert "not running" in capsys.readouterr().out
    assert main(["dev", service, "stop", "--state-dir", str(tmp_path)]) == 0
    assert "was not running" in capsys.readouterr().out


@pytest.mark.parametrize("service", ["kafka", "postgres"])
def test_stale_record_is_cleaned_up(service: str, tmp_path: Path) -> None:
    """A record whose process died (or whose PID now belongs to something else) is not running:
    status says so, signals nothing, and removes the record and the leftover directory."""
    leftover = tmp_path / "leftover"
    (leftover / "data").mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = RunRecord(
            service=service, pid=sleeper.pid, address="x", work_dir=str(leftover),
            log_file=str(leftover / "log"), keep_data=False, started_at=time.time(), ready_seconds=1.0,
        )  # fmt: skip
        record.write(tmp_path / f"{service}.json")
        (tmp_path / f"{service}.pid").write_text(f"{sleeper.pid}\n")
        assert main(["dev", service, "status", "--state-dir", str(tmp_path)]) == 3
        assert sleeper.poll() is None, "a process that is not ours must not be signalled"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not (tmp_path / f"{service}.json").exists()
    assert not (tmp_path / f"{service}.pid").exists()
    assert not leftover.exists()


def test_unreadable_record_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kafka.json").write_text(json.dumps({"service": "kafka"}))
    assert main(["dev", "kafka", "status", "--state-dir", str(tmp_path)]) == 3  # a dependency unavailable
    assert "unreadable run record" in capsys.readouterr().err
