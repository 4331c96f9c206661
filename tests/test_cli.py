"""The `xidpipe` command line as an operator uses it: real processes, real files, exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from xidpipe.cli import build_parser

XID79 = "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"


def xidpipe(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], input=stdin, capture_output=True,
                          timeout=120, check=False)


def all_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += all_commands(sub, (*path, name))
    return out


@pytest.mark.parametrize("command", all_commands(build_parser()), ids=lambda c: " ".join(c) or "xidpipe")
def test_every_command_has_help(command: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*command, "--help"])
    assert exc.value.code == 0


def test_parse_reads_stdin_and_prints_json_lines() -> None:
    proc = xidpipe("parse", stdin=(b"noise\n" + XID79.encode()) * 2)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [(r["line"], r["kind"], r["xid"], r["pci"]) for r in records] == [
        (2, "xid", 79, "0000:3b:00.0"), (4, "xid", 79, "0000:3b:00.0")]


def test_parse_unreadable_file_exits_2_with_a_message(tmp_path: Path) -> None:
    proc = xidpipe("parse", str(tmp_path / "missing.log"))
    assert proc.returncode == 2
    assert b"missing.log: no such file" in proc.stderr


def test_scan_exit_codes(tmp_path: Path) -> None:
    clean = tmp_path / "clean.log"
    clean.write_text("[    1.000000] Linux version 6.1.0\n")
    faulty = tmp_path / "gpu-node-09.log"
    faulty.write_text(XID79)
    assert xidpipe("scan", str(clean)).returncode == 0
    proc = xidpipe("scan", str(faulty))
    assert proc.returncode == 1
    assert b"gpu-node-09" in proc.stdout and b"gpu_lost" in proc.stdout and b"hardware" in proc.stdout
    missing = xidpipe("scan", str(faulty), str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and b"nope.log: no such file" in missing.stderr
    assert xidpipe("scan", str(tmp_path)).returncode == 2


def test_scan_json(tmp_path: Path) -> None:
    f = tmp_path / "n.log"
    f.write_text(XID79 + "[ 1844.000000] NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666\n")
    proc = xidpipe("scan", "--json", str(f))
    assert proc.returncode == 1
    (inc,) = json.loads(proc.stdout)
    assert inc["host"] == "n" and inc["gpu_uuid"] == "GPU-2b7e9c4a-1111-2222-3333-444455556666"
    assert inc["category"] == "hardware" and inc["codes"] == ["Xid 79"] and inc["catalog_version"]
    assert inc["fingerprint"].startswith("v2:") and inc["component"] == "gpu"


def test_scan_with_recorded_state_attributes_faults_to_their_pods(tmp_path: Path) -> None:
    samples = Path(__file__).resolve().parents[1] / "xidpipe" / "samples" / "cluster"
    log = str(samples / "gpu-node-01.log")
    proc = xidpipe("scan", "--json", "--state", str(samples / "state.jsonl"), log)
    assert proc.returncode == 1, proc.stderr
    (job,) = json.loads(proc.stdout)  # the job that crashed on two GPUs: its workload's incident
    assert (job["component"], job["component_id"]) == ("workload", "team-vision/resnet-train/trainer")
    assert job["pods"] == ["team-vision/resnet-train-0/trainer", "team-vision/resnet-train-1/trainer"]
    alone = json.loads(xidpipe("scan", "--json", log).stdout)  # no pods known: each GPU's faults are its own
    assert sorted(i["component"] for i in alone) == ["gpu", "gpu"]
    bad = tmp_path / "state.jsonl"
    bad.write_text('{"kind": "nothing"}\n')
    proc = xidpipe("scan", "--state", str(bad), log)
    assert proc.returncode == 2 and f"{bad}:1: not a node record".encode() in proc.stderr


def test_bad_input_never_crashes_nor_invents_a_fault(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 4000 + b"\xff\xfe\x00NVRM\x00Xid (\x80\x81" + b"\n" * 3)
    huge = tmp_path / "huge.log"
    huge.write_bytes(b"A" * (6 * 1024 * 1024) + b" NVRM: " + b"B" * 1024 * 1024 + b"\n" + XID79.encode())
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.log"
    truncated.write_bytes(b"NVRM: The NVIDIA GPU 0000:63:00.0\nNVRM: Xid (PCI:0000:3b:0")
    assert xidpipe("scan", str(garbage), str(empty), str(truncated)).returncode == 0
    proc = xidpipe("parse", str(huge))
    assert proc.returncode == 0
    (rec,) = [json.loads(x) for x in proc.stdout.decode().splitlines()]
    assert rec["line"] == 2 and rec["xid"] == 79


def test_invalid_utf8_inside_a_fault_line_keeps_the_fault(tmp_path: Path) -> None:
    f = tmp_path / "latin1.log"
    f.write_bytes(b"[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=caf\xe9, Graphics Exception\n")
    (rec,) = [json.loads(x) for x in xidpipe("parse", str(f)).stdout.decode().splitlines()]
    assert rec["xid"] == 13 and rec["process"] == "caf\ufffd"


def test_demo_scan_only_scans_the_sample_cluster() -> None:
    proc = xidpipe("demo", "--scan-only")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    lines = {line.split()[0] + " " + line.split()[3]: line for line in out.splitlines()
             if line.startswith("gpu-node-")}
    # The failing GPU is one incident: the jobs it crashed and its ECC errors.
    assert "hardware" in lines["gpu-node-02 memory"] and "Xid 13" in lines["gpu-node-02 memory"]
    assert "hardware" in lines["gpu-node-03 gpu_lost"]
    assert " 800 " in lines["gpu-node-04 nvlink"]
    assert "interconnect" in lines["gpu-node-04 nvswitch"]
    assert "application" in lines["gpu-node-01 application"]
