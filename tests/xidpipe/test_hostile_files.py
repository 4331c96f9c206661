"""Hostile input files: `xidpipe replay` and `scan` refuse what is no regular file (a FIFO would block
them for ever, `/dev/zero` never ends) and replay any symbolic link out of its directory (it read
/etc/passwd); every date and number in a replay is bounded; and no input ends in a traceback: each is
exit status 2 with one line naming the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xidpipe.cli import main

XID79 = "Nov 25 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."
INVENTORY = {"schema_version": 1, "kind": "inventory", "node": "n1", "record_id": "i",
             "emitted_at": "2025-11-25T09:00:00+00:00", "gpus": []}


def _xidpipe(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The command in its own process, so that a hang fails the test instead of stopping the suite."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def _cluster(tmp_path: Path) -> Path:
    root = tmp_path / "cluster"
    root.mkdir()
    (root / "n1.log").write_text(XID79 + "\n")
    return root


def _refused(proc: subprocess.CompletedProcess[str], named: Path | str, why: str) -> None:
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(named) in err and why in err, err


@pytest.mark.parametrize("name", ["n2.log", "state.jsonl", "replay.json"])
def test_replay_refuses_a_symbolic_link_out_of_its_directory(tmp_path: Path, name: str) -> None:
    root = _cluster(tmp_path)
    (root / name).symlink_to("/etc/passwd")
    proc = _xidpipe("replay", "--json", str(root))
    _refused(proc, root / name, "symbolic link out of")
    assert "root:" not in proc.stdout + proc.stderr


def test_replay_follows_a_symbolic_link_inside_its_directory(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = _cluster(tmp_path)
    (root / "logs").mkdir()
    (root / "n1.log").rename(root / "logs" / "n1.txt")
    (root / "n1.log").symlink_to(Path("logs") / "n1.txt")
    assert main(["replay", "--json", str(root)]) == 1
    assert [i["node"] for i in json.loads(capsys.readouterr().out)["incidents"]] == ["n1"]


@pytest.mark.parametrize("name", ["n2.log", "state.jsonl"])
def test_replay_refuses_a_fifo_instead_of_waiting_on_it(tmp_path: Path, name: str) -> None:
    root = _cluster(tmp_path)
    os.mkfifo(root / name)
    _refused(_xidpipe("replay", str(root), timeout=30), root / name, "not a regular file")


@pytest.mark.parametrize(("field", "value"), [
    ("emitted_at", "0001-01-01T00:00:00+14:00"),  # before year 1 in UTC: a traceback, exit 1, before
    ("emitted_at", "9999-12-31T23:59:59-14:00"),  # after year 9999 in UTC
    ("emitted_at", "1900-01-01T00:00:00+00:00"),
    ("boot_time", "0001-01-01T00:00:00+14:00"),
])
def test_replay_refuses_a_state_record_dated_out_of_range(tmp_path: Path, field: str, value: str) -> None:
    root = _cluster(tmp_path)
    (root / "state.jsonl").write_text(json.dumps({**INVENTORY, field: value}) + "\n")
    _refused(_xidpipe("replay", str(root)), f"{root / 'state.jsonl'}:1", "out of range")


@pytest.mark.parametrize("gpus", [
    [{"index": 10**30, "uuid": "GPU-1", "pci_bus_id": "0000:18:00.0"}],
    [{"index": 0, "uuid": "GPU-1", "pci_bus_id": "0000:18:00.0", "numa_node": 10**20}],
])
def test_replay_refuses_a_state_record_with_a_number_out_of_range(tmp_path: Path, gpus: list[object]) -> None:
    root = _cluster(tmp_path)
    (root / "state.jsonl").write_text(json.dumps({**INVENTORY, "gpus": gpus}) + "\n")
    proc = _xidpipe("replay", str(root))
    assert "Traceback" not in proc.stderr
    _refused(proc, f"{root / 'state.jsonl'}:1", "out of range")


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_a_log_line_dated_out_of_range_ends_in_no_traceback(tmp_path: Path, stamp: str) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "n1.log").write_text(f"{stamp} n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, fallen\n")
    for args in (["replay", str(root)], ["scan", str(root / "n1.log")]):
        proc = _xidpipe(*args)
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 1, 2), proc.stderr


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_scan_refuses_what_is_no_regular_file(tmp_path: Path, target: str) -> None:
    path = Path(target)
    if target == "fifo":
        path = tmp_path / "kern.log"
        os.mkfifo(path)
    _refused(_xidpipe("scan", str(path), timeout=30), path, "not a regular file")
    _refused(_xidpipe("parse", str(path), timeout=30), path, "not a regular file")


def test_scan_reads_a_symbolic_link_to_a_log_and_standard_input(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID79 + "\n")
    (tmp_path / "link.log").symlink_to(log)
    assert _xidpipe("scan", str(tmp_path / "link.log")).returncode == 1
    proc = subprocess.run([sys.executable, "-m", "xidpipe.cli", "scan", "-"], input=XID79 + "\n", text=True,
                          capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.returncode == 1, proc.stderr


def test_an_endless_input_stops_at_the_input_bound(tmp_path: Path) -> None:
    """`cat /dev/zero | xidpipe scan -` would run for ever: reading stops at a bound, with the reason."""
    from xidpipe.commands._input import InputError, iter_lines

    path = tmp_path / "big.log"
    with open(path, "wb") as fh:
        fh.truncate(8 * 1024 * 1024)
    with pytest.raises(InputError, match="more than 1048576 bytes"):
        for _ in iter_lines(str(path), max_bytes=1024 * 1024):
            pass
