"""Every exit status the documentation states is the one the command ends with.

The legends (README, docs/history.md, docs/configuration.md, `xidpipe --help`) are
`xidpipe/commands/exits.py`'s. Every other sentence that names an exit status is a claim of this
file's `CLAIMS`, quoted, and each claim is checked by running the command into that situation, or,
where that needs a cluster, by the test that does (named) or the code that ends with it. A sentence
about an exit status that no claim quotes fails `test_every_exit_status_the_docs_state_is_claimed`:
quote it in `CLAIMS` with its check.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.docs.doctext import DOCS, ROOT, paragraphs, relative, text_of
from xidpipe.commands import exits

MEANING = {0: "ok", 1: "findings", 2: "usage or input error", 3: "dependency unavailable", 4: "refused"}
XID79 = "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
UNREACHABLE_KUBE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def xidpipe(*args: str, cwd: Path, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_") or k.startswith("XIDPIPE_TEST_")}
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=cwd, env={**clean, **env}).returncode


# --- the situations each claim is about --------------------------------------------------------------


def scan_exits(tmp: Path) -> None:
    clean, faulty = tmp / "clean.log", tmp / "node.log"
    clean.write_text("[    1.000000] Linux version 6.1.0\n")
    faulty.write_text(XID79)
    assert [xidpipe("scan", str(f), cwd=tmp) for f in (clean, faulty, tmp / "missing.log")] == [0, 1, 2]


def replay_exits(tmp: Path) -> None:
    quiet = tmp / "quiet"
    quiet.mkdir()
    (quiet / "node-a.log").write_text("[    1.000000] Linux version 6.1.0\n")
    sample = ROOT / "xidpipe" / "samples" / "cluster"
    assert [xidpipe("replay", str(d), cwd=tmp) for d in (quiet, sample, tmp / "nothing")] == [0, 1, 2]


def replay_refuses_a_later_layout(tmp: Path) -> None:
    later = tmp / "later"
    later.mkdir()
    (later / "node-a.log").write_text(XID79)
    (later / "replay.json").write_text(json.dumps({"format": "xidpipe-replay", "version": 99}))
    assert xidpipe("replay", str(later), cwd=tmp) == 2


def breaker_status_exits(tmp: Path) -> None:
    from models.cordon import BreakerState
    from respond.cordon.action_log import JsonlActionStore

    log = tmp / "actions.jsonl"
    JsonlActionStore(log).set_breaker(BreakerState())
    closed = xidpipe("breaker", "status", "--action-log", str(log), cwd=tmp)
    JsonlActionStore(log).set_breaker(BreakerState(tripped=True, tripped_at=datetime.now(UTC), reason="pool"))
    assert (closed, xidpipe("breaker", "status", "--action-log", str(log), cwd=tmp)) == (0, 4)


def lifecycle_exits(tmp: Path) -> None:
    from tests.xidpipe.sample_history import BUS, build

    url = build(tmp).url
    assert xidpipe("incidents", "transition", BUS, "returned", "--reason", "x", "--database-url", url, cwd=tmp) == 4
    assert xidpipe("incidents", "transition", "v2:0000", "closed", "--reason", "x", "--database-url", url,
                   cwd=tmp) == 2
    assert xidpipe("incidents", "transition", "v2:", "closed", "--reason", "x", "--database-url", url, cwd=tmp) == 2


def ambiguous_prefixes(tmp: Path) -> None:
    from tests.xidpipe.sample_history import build

    url = build(tmp).url
    assert xidpipe("gpus", "history", "GPU-", "--database-url", url, cwd=tmp) == 2  # every card's UUID
    assert xidpipe("incidents", "show", "v2:", "--database-url", url, cwd=tmp) == 2


def release_without_a_cluster(tmp: Path) -> None:
    assert xidpipe("node", "release", "n1", "--reason", "x", "--action-log", str(tmp / "a.jsonl"), cwd=tmp) == 2


def release_with_the_cluster_unreachable(tmp: Path) -> None:
    (tmp / "kubeconfig").write_text(UNREACHABLE_KUBE)
    assert xidpipe("node", "release", "n1", "--reason", "x", "--kubeconfig", str(tmp / "kubeconfig"),
                   "--action-log", str(tmp / "a.jsonl"), cwd=tmp, XIDPIPE_STARTUP_DEADLINE_S="1") == 3
    from xidpipe.commands import node  # a change the cluster failed: its result is a dependency unavailable

    assert 'raise Unavailable(f"failed: {result.reason}")' in inspect.getsource(node)


def release_refused_by_the_cordons_owner(tmp: Path) -> None:
    # Needs a cluster with a node someone else cordoned: the k8s test runs it.
    from tests.respond.cordon import test_action_cli

    source = inspect.getsource(test_action_cli.test_node_release_as_the_worker)
    assert 'refused.returncode == 4 and "cordoned, but not by xidpipe"' in source


def past_the_startup_deadline(tmp: Path) -> None:
    tokens = tmp / "tokens"
    tokens.write_text(f"reader read {secrets.token_urlsafe(32)}\n")
    tokens.chmod(0o600)
    assert xidpipe("serve", "--database-url", "postgresql+psycopg://x@127.0.0.1:1/x", "--port", "0",
                   "--tokens-file", str(tokens), cwd=tmp, XIDPIPE_STARTUP_DEADLINE_S="1") == 3


def dev_status(tmp: Path) -> None:
    assert xidpipe("dev", "kafka", "status", "--state-dir", str(tmp), cwd=tmp) == 3
    (tmp / "kafka.json").write_text("{}")
    assert xidpipe("dev", "kafka", "status", "--state-dir", str(tmp), cwd=tmp) == 3
    # Running: the dev CLI's own test starts one (tests/infra/test_dev_cli.py); the code says 0.
    from xidpipe.commands import dev

    assert "        return 0\n\n    return status" in inspect.getsource(dev)


def fenced_responder_exits_3(tmp: Path) -> None:
    # The fence needs a Lease lost while work runs; the code that ends the process says how.
    from xidpipe.commands import respond

    assert "os._exit(EXIT_UNAVAILABLE)" in inspect.getsource(respond)


def serve_metrics_port_taken(tmp: Path) -> None:
    import socket

    tokens = tmp / "tokens"
    tokens.write_text(f"reader read {secrets.token_urlsafe(32)}\n")
    tokens.chmod(0o600)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert xidpipe("serve", "--database-url", f"sqlite:///{tmp / 'h.db'}", "--port", "0", "--tokens-file",
                       str(tokens), cwd=tmp, XIDPIPE_WEB_METRICS_PORT=str(port)) == 3


def replay_refuses_a_file_it_must_not_read(tmp: Path) -> None:
    named, linked, fifo, dated = (tmp / d for d in ("named", "linked", "fifo", "dated"))
    for d in (named, linked, fifo, dated):
        d.mkdir()
    (named / "node_a.log").write_text(XID79)  # no node name: an underscore
    (linked / "node-a.log").symlink_to("/etc/passwd")
    os.mkfifo(fifo / "node-a.log")
    (dated / "node-a.log").write_text(XID79)
    (dated / "state.jsonl").write_text(json.dumps({
        "schema_version": 1, "kind": "inventory", "node": "node-a", "record_id": "inv-1",
        "emitted_at": "0001-01-01T00:00:00+14:00", "gpus": []}) + "\n")
    assert [xidpipe("replay", str(d), cwd=tmp) for d in (named, linked, fifo, dated)] == [2, 2, 2, 2]


def scan_refuses_what_is_no_regular_file(tmp: Path) -> None:
    os.mkfifo(tmp / "pipe")
    assert [xidpipe("scan", str(f), cwd=tmp) for f in (tmp / "pipe", Path("/dev/zero"))] == [2, 2]
    replay_refuses_a_file_it_must_not_read(tmp)


def kafka_acls_without_brokers(tmp: Path) -> None:
    assert xidpipe("kafka", "acls", "plan", cwd=tmp, XIDPIPE_BOOTSTRAP_SERVERS="127.0.0.1:1") == 3


@dataclass(frozen=True)
class Claim:
    doc: str
    quote: str  # the words of the documentation, exit statuses included
    check: Callable[[Path], None]


CLAIMS = (
    Claim("README.md", "Exit status: 0 no fault, 1 faults found, 2 an input could not be read.", scan_exits),
    Claim("docs/replay.md", "Exit status: 0 no incident, 1 incidents found, 2 DIR, a file in it or the policy "
          "cannot be read", replay_exits),
    Claim("docs/replay.md", "refuses the directory with exit status 2", replay_refuses_a_later_layout),
    Claim("deploy/README.md", "(exit 4 while tripped)", breaker_status_exits),
    Claim("docs/history.md", "A step the table does not allow is refused with exit status 4", lifecycle_exits),
    Claim("docs/history.md", "a prefix of several incidents, fails with exit status 2", lifecycle_exits),
    Claim("docs/history.md", "an ambiguous prefix is refused with the candidates (exit 2)", ambiguous_prefixes),
    Claim("docs/configuration.md", "It refuses (exit 4) when the node's cordon was not set by xidpipe",
          release_refused_by_the_cordons_owner),
    Claim("docs/configuration.md", "no cluster configured it is an error (exit 2)", release_without_a_cluster),
    Claim("docs/configuration.md", "the cluster unreachable or a change it failed exits 3",
          release_with_the_cluster_unreachable),
    Claim("docs/configuration.md", "the command prints one line and exits with status 3", past_the_startup_deadline),
    Claim("docs/configuration.md", "before it exits with status 3 (0: retry for ever)", past_the_startup_deadline),
    Claim("docs/testing.md", "exit 0 running, 3 not running", dev_status),
    Claim("docs/respond.md", "(exit 3: the Lease it depends on is lost)", fenced_responder_exits_3),
    Claim("docs/operations.md", "`xidpipe serve` exits with status 3 instead, naming the port",
          serve_metrics_port_taken),
    Claim("docs/replay.md", "or the replay exits 2 naming the file", replay_refuses_a_file_it_must_not_read),
    Claim("docs/replay.md", "All of these are exit status 2 with one line.", replay_refuses_a_file_it_must_not_read),
    Claim("docs/security.md", "every refusal is exit status 2 with one line naming the file (and line)",
          scan_refuses_what_is_no_regular_file),
    Claim("deploy/README.md", "exit status 3 when the brokers cannot be reached or refuse the principal",
          kafka_acls_without_brokers),
)

_EXIT = re.compile(r"\bexit(?:s|ed|ing)?\b", re.IGNORECASE)
_STATUS = re.compile(r"(?<![\w.:/-])[0-4](?![\w.:/-]*\d)")
_LEGEND = "the same for every command"
# Documents whose exit codes are no command's: the test cluster's simulated containers end with them.
CONTAINERS_ONLY = {"docs/testcluster.md"}


def stated() -> list[tuple[str, int, str, int]]:
    """(doc, line, sentence, offset) of each exit status a sentence of the documentation states, but
    in the legends (`test_the_legends_are_exits_py`)."""
    out = []
    for doc in DOCS:
        if relative(doc) in CONTAINERS_ONLY:
            continue
        for line, text in paragraphs(doc):
            if _LEGEND in text or re.match(r"\| [0-4] \|", text):  # a legend or its table
                continue
            for piece in re.split(r"(?<=[.;])\s", text):
                found = _EXIT.search(piece)
                if found:
                    out += [(relative(doc), line, piece, found.start() + m.start())
                            for m in _STATUS.finditer(piece[found.start():])]
    return out


def test_every_exit_status_the_docs_state_is_claimed() -> None:
    unclaimed = [f"{doc}:{line}: {piece!r} (at {piece[at:at + 12]!r})" for doc, line, piece, at in stated()
                 if not any(c.doc == doc and c.quote in piece and
                            piece.index(c.quote) <= at < piece.index(c.quote) + len(c.quote) for c in CLAIMS)]
    assert unclaimed == []


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.doc}: {c.quote[:50]}")
def test_each_claim_is_what_the_command_does(claim: Claim, tmp_path: Path) -> None:
    text = " ".join(text_of(ROOT / claim.doc).split())
    assert claim.quote in text, f"{claim.doc} no longer says {claim.quote!r}"
    claim.check(tmp_path)


def _legends() -> dict[str, dict[int, str]]:
    readme = " ".join(text_of(ROOT / "README.md").split())
    history = " ".join(text_of(ROOT / "docs" / "history.md").split())
    config = text_of(ROOT / "docs" / "configuration.md")
    from xidpipe.cli import EPILOG

    def pairs(text: str, pattern: str) -> dict[int, str]:
        return {int(m.group(1)): m.group(2) for m in re.finditer(pattern, text)}

    legend = readme.split("Exit codes, the same for every command:", 1)[1].split(". ", 1)[0]
    history_legend = history.split("**Exit status**, the same for every command:", 1)[1].split(". Errors", 1)[0]
    table = config.split("**Exit statuses**", 1)[1].split("\n\n###", 1)[0]
    return {
        "README.md": pairs(legend, r"\*\*([0-4])\*\* (.*?)(?=, \*\*[0-4]\*\*|$)"),
        "docs/history.md": pairs(history_legend, r"(?:^ |; )([0-4]) (.*?)(?=; [0-4] |$)"),
        "docs/configuration.md": pairs(table, r"(?m)^\| ([0-4]) \| (.*) \|$"),
        "xidpipe --help": pairs(EPILOG.split(":", 1)[1], r"(?:^ |, )([0-4]) (.*?)(?=, [0-4] |$)"),
        "xidpipe/commands/exits.py": dict(exits.EXIT_CODES),
    }


@pytest.mark.parametrize("where", list(_legends()))
def test_the_legends_are_exits_py(where: str) -> None:
    legend = _legends()[where]
    assert sorted(legend) == [0, 1, 2, 3, 4], legend
    for code, meaning in legend.items():
        words = MEANING[code].split()
        assert all(w in meaning for w in words), f"{where}: {code} is {meaning!r}, not {MEANING[code]!r}"
    # Findings: the two commands that look for them, and no other.
    assert "scan" in legend[1] and "replay" in legend[1] and "exits 0" in legend[1], legend[1]


def test_only_scan_and_replay_end_with_findings(tmp_path: Path) -> None:
    commands = ROOT / "xidpipe" / "commands"
    findings = sorted(p.stem for p in commands.glob("*.py")
                      if p.stem != "exits" and re.search(r"EXIT_FINDINGS|return 1\b|exit\(1\)", p.read_text()))
    assert findings == ["replay", "scan"]
    log = tmp_path / "node.log"
    log.write_text(XID79)
    assert xidpipe("parse", str(log), cwd=tmp_path) == 0  # it printed a record: it answered
    from tests.xidpipe.sample_history import build

    url = build(tmp_path).url
    for args in (("incidents", "list"), ("stats",), ("gpus", "list")):
        assert xidpipe(*args, "--database-url", url, cwd=tmp_path) == 0, args
