"""What every `xidpipe` command does the same way: --version, exit codes, one-line errors, "did you
mean", flags on either side of the action, id prefixes, no silent no-op, completion, plain tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xidpipe.cli import main, package_version
from xidpipe.commands.output import table

XID79 = "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"


def run(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False, **kw)  # type: ignore[call-overload]


def test_version() -> None:
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"xidpipe {package_version()}" != "xidpipe unknown"


def test_scan_with_stdin_closed_is_an_input_error_not_a_finding() -> None:
    proc = subprocess.run(f"{sys.executable} -m xidpipe.cli scan - <&-", shell=True, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "xidpipe scan: cannot read standard input: it is closed"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_that_cannot_be_written_is_one_line_and_status_3(tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    log.write_text(XID79 * 200)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "xidpipe.cli", "parse", str(log)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert proc.returncode == 3
    assert proc.stderr.strip() == "xidpipe parse: cannot write the output: No space left on device"


def test_an_unreachable_database_is_one_line_status_3_and_hides_the_password() -> None:
    proc = run("incidents", "list", "--database-url", "postgresql+psycopg://ops:s3cret@127.0.0.1:1/xidpipe")
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("xidpipe incidents: cannot open postgresql+psycopg://ops:***@127.0.0.1:1/xidpipe")
    assert "s3cret" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_read_only_command_never_creates_a_database(tmp_path: Path) -> None:
    typo = tmp_path / "xidpip.db"
    for argv in (["incidents", "list"], ["stats"], ["gpus", "list"], ["db", "current"]):
        proc = run(*argv, "--database-url", f"sqlite:///{typo}")
        assert proc.returncode == 3, proc.stderr
        assert f"no incident history at {typo}" in proc.stderr or f"no database at {typo}" in proc.stderr
        assert "XIDPIPE_DATABASE_URL" in proc.stderr and not typo.exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["incidents", "list", "--category", "hardwar"], "unknown category 'hardwar' (did you mean 'hardware'"),
    (["incidents", "list", "--component", "gpus"], "unknown component 'gpus' (did you mean 'gpu'"),
    (["incidents", "list", "--lifecycle", "clsoed"], "unknown lifecycle 'clsoed' (did you mean 'closed'"),
    (["incidents", "list", "--since", "the other day"], "not a time: 'the other day' (examples: 24h, 7d"),
    (["gpus", "list", "--state", "retird"], "unknown state 'retird' (did you mean 'retired'"),
    (["policy", "test", "--node", "n1", "--family", "gpu_lsot"], "unknown family 'gpu_lsot' (did you mean 'gpu_lost'"),
    (["policy", "test", "--node", "n1", "--category", "hardwar"],
     "unknown category 'hardwar' (did you mean 'hardware'"),
    (["policy", "test", "--node", "n1", "--action", "RESET_GPUS"],
     "unknown action 'RESET_GPUS' (did you mean 'RESET_GPU'"),
])
def test_enum_and_time_flags_are_validated(argv: list[str], message: str) -> None:
    proc = run(*argv)
    assert proc.returncode == 2 and message in proc.stderr


def test_relative_times_are_accepted_and_flags_go_either_side(tmp_path: Path) -> None:
    from history.engine import make_engine
    from history.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'x.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    for argv in (["stats", "--since", "yesterday", "--json"], ["incidents", "list", "--since", "7d", "--json"],
                 ["incidents", "--json", "list", "--until", "2026-11-25"]):
        for placed in ([*argv, "--database-url", url], ["--database-url", url, *argv],
                       [argv[0], "--database-url", url, *argv[1:]]):
            assert main(placed) == 0, placed


def test_ambiguous_and_unknown_incident_prefixes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from models.stream_policy import PipelinePolicy
    from streams.store import Store
    from tests.history.test_lifecycle_and_gpus import feed
    from tests.streams.records import T0, Kmsg, s

    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = Store(url, PipelinePolicy())
    store.create_schema()
    feed(store, [Kmsg("node-a").xid(0, 79, T0 + s(1)), Kmsg("node-b").xid(1, 79, T0 + s(2))])
    store.dispose()
    assert main(["incidents", "list", "--database-url", url, "--json"]) == 0
    ids = [i["incident_id"] for i in json.loads(capsys.readouterr().out)["incidents"]]
    assert main(["incidents", "show", "v2:", "--database-url", url]) == 2
    err = capsys.readouterr().err
    assert "'v2:' is ambiguous: 2 incidents match it" in err and all(i in err for i in ids)
    assert main(["incidents", "show", "v2:%", "--database-url", url]) == 2  # a LIKE wildcard matches nothing
    assert "no incident 'v2:%'" in capsys.readouterr().err
    assert main(["incidents", "show", ids[0][:12], "--database-url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dossier"]["incident_id"] == ids[0]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script(shell: str) -> None:
    proc = run("completion", shell)
    assert proc.returncode == 0 and "xidpipe" in proc.stdout and "_ARGCOMPLETE" in proc.stdout


def test_completion_completes_commands_and_closed_sets(tmp_path: Path) -> None:
    def complete(line: str) -> set[str]:
        out = tmp_path / "out"
        env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"}
        subprocess.run([sys.executable, "-m", "xidpipe.cli"], env=env, capture_output=True, timeout=60, check=False)
        return set(out.read_text().split("\n"))

    assert {"incidents", "silence", "stats", "completion"} <= complete("xidpipe ")
    assert complete("xidpipe incidents list --component ") >= {"gpu", "nvswitch", "workload", "fleet"}


def test_tables_piped_are_plain_columns_one_row_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    long = "x" * 300
    table(["A", "B"], [["one", long], ["two", None]])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["A", "B"] and lines[1].split() == ["one", long] and lines[2].split() == ["two", "-"]
    assert "\x1b[" not in "".join(lines) and all(line == line.rstrip() for line in lines)
