"""Node names given on the command line are node names (`models.node_names`), refused otherwise with the
reason, exit status 2, before anything is read or changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from xidpipe.cli import main

BAD = ["node-a/../node-b", ".", "javascript:alert(1)", "GPU_NODE"]
COMMANDS = {
    "incidents list": ["incidents", "list", "--node", "{}"],
    "gpus list": ["gpus", "list", "--node", "{}"],
    "node release": ["node", "release", "{}", "--reason", "test", "--dry-run"],
    "policy test": ["policy", "test", "--xid", "79", "--node", "{}"],
    "agent": ["agent", "--node", "{}", "--source", "file", "--log-file", "/dev/null", "--no-follow"],
}


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_node_flag_that_names_no_node_is_a_usage_error(command: str, bad: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.format(bad) for a in COMMANDS[command]] + ["--database-url", f"sqlite:///{tmp_path / 'none.db'}"]
    if command == "agent":
        argv = [*argv[:-2], "--state-dir", str(tmp_path / "state")]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after argparse's usage lines
    assert "not a node name" in last and "Traceback" not in last
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "state").exists()


def test_the_agent_refuses_a_node_name_from_its_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NODE_NAME", "Gpu_Node_7")
    argv = ["agent", "--source", "file", "--log-file", "/dev/null", "--no-follow", "--state-dir", str(tmp_path / "s")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("xidpipe agent: ") and "not a node name" in err and "'Gpu_Node_7'" in err
