"""Only the kernel's lines become faults, read from files too: `xidpipe scan`, `parse` and `replay`
(and through it the agent's file source) drop lines a process wrote into syslog, journal entries of
another transport and `/dev/kmsg` records of a user facility."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xidpipe.cli import main

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
FOREIGN = [
    f"Nov 25 10:00:00 gpu-1 alice: {XID79}",  # logger -t alice
    f"Nov 25 10:00:01 gpu-1 sshd[12]: Invalid user {XID79.replace('3b:00', '5e:00')} from 10.0.0.9",
    f"Nov 25 10:00:02 gpu-1 sshd[12]: Invalid user {XID79.replace('3b:00', '86:00')}",
    json.dumps({"MESSAGE": XID79.replace("3b:00", "af:00"), "_TRANSPORT": "syslog", "SYSLOG_FACILITY": "1",
                "__REALTIME_TIMESTAMP": "1764064803000000"}),
    f"12,4711,1843308145,-;{XID79.replace('3b:00', 'd8:00')}",
]
KERNEL = f"Nov 25 10:00:09 gpu-1 kernel: {XID79.replace('3b:00', '18:00')}"


def _log(tmp_path: Path, lines: list[str], name: str = "gpu-1.log") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("line", FOREIGN,
                         ids=["syslog-tag", "sshd-login", "sshd-login-2", "journal-syslog", "kmsg-user"])
def test_scan_and_parse_find_no_fault_in_user_space_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          line: str) -> None:
    path = _log(tmp_path, [line])
    assert main(["scan", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["parse", str(path)]) == 0
    assert capsys.readouterr().out == ""


def test_scan_keeps_the_kernel_line_among_foreign_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _log(tmp_path, [*FOREIGN, KERNEL])
    assert main(["scan", "--json", str(path)]) == 1
    incidents = json.loads(capsys.readouterr().out)
    assert [(i["pci"], i["codes"]) for i in incidents] == [("0000:18:00.0", ["Xid 79"])]


def test_replay_finds_no_incident_in_user_space_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cluster"
    root.mkdir()
    _log(root, FOREIGN, "gpu-1.log")
    assert main(["replay", "--json", str(root)]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["incidents"] == [] and body["cordons"] == []
    _log(root, [*FOREIGN, KERNEL], "gpu-1.log")
    assert main(["replay", "--json", str(root)]) == 1
    body = json.loads(capsys.readouterr().out)
    assert [i["pci"] for i in body["incidents"]] == ["0000:18:00.0"]
