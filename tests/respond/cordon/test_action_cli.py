"""`xidpipe policy`, `xidpipe breaker` and `xidpipe node release` as an operator runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from models.cordon import ANN_RELEASED_BY, BreakerState
from respond.cordon.action_log import JsonlActionStore
from tests.kube import unique
from tests.respond.cordon.conftest import ExecutorFactory, NodeFactory, xid79

REPO = Path(__file__).resolve().parents[3]


def xidpipe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=REPO)


def decision(*args: str) -> dict[str, Any]:
    proc = xidpipe("policy", "test", *args)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_policy_check_accepts_the_example_and_rejects_a_bad_file(tmp_path: Path) -> None:
    good = xidpipe("policy", "check", "deploy/policy.example.yaml")
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text("breaker:\n  max_pool_share: 2\nrules: [{name: x, action: cordon_after}]\n")
    bad = xidpipe("policy", "check", str(bad_file))

    assert good.returncode == 0 and "valid cordon policy: 9 rules" in good.stdout
    assert bad.returncode == 2 and bad.stdout == ""
    assert "breaker.max_pool_share: Input should be less than or equal to 1" in bad.stderr
    assert "rules.0: action cordon_after needs both occurrences and window_s" in bad.stderr


@pytest.mark.parametrize(("args", "cordon", "outcome", "reason_part"), [
    (["--xid", "79", "--node", "n1"], True, "cordon", "rule gpu-lost"),
    (["--xid", "13", "--node", "n1", "--count", "20"], False, "not_needed", "rule application"),
    (["--xid", "13", "--node", "n1", "--count", "3", "--category", "suspected_hardware"], True, "cordon",
     "rule suspected-hardware"),
    (["--xid", "74", "--node", "n1", "--count", "2"], False, "not_needed", "below the threshold of 3"),
    (["--xid", "79", "--node", "n1", "--labels", "xidpipe.io/cordon-opt-out=true"], False, "opted_out",
     "cordon-opt-out=true"),
    (["--xid", "79", "--node", "n1", "--unschedulable"], False, "foreign_cordon", "someone else"),
    (["--xid", "79", "--node", "n1", "--pool-nodes", "20", "--pool-cordoned", "2"], False, "trip_breaker",
     "limit of 2"),
    (["--xid", "95", "--node", "n1", "--breaker-tripped"], False, "breaker_open", "operator must reset"),
])
def test_policy_test_shows_the_decision_and_its_reason(args: list[str], cordon: bool, outcome: str,
                                                       reason_part: str) -> None:
    out = decision(*args)

    assert (out["cordon"], out["outcome"]) == (cordon, outcome)
    assert reason_part in out["reason"]


@pytest.mark.parametrize(("times", "outcome", "reason_part"), [
    (["--at", "2026-11-29T08:00:00Z", "--at", "2026-11-30T04:00:00Z"], "cordon", "2 occurrence(s) within 86400 s"),
    (["--at", "2026-11-28T08:00:00Z", "--at", "2026-11-30T04:00:00Z"], "not_needed", "1 occurrence(s)"),
    (["--occurrences", "2", "--within", "72000"], "cordon", "contained-ecc-repeats: 2 occurrence(s)"),
    (["--occurrences", "2", "--within", "100000"], "not_needed", "below the threshold of 2"),
])
def test_policy_test_takes_occurrence_times(times: list[str], outcome: str, reason_part: str) -> None:
    """Would two contained-ECC faults a day apart cordon? The example policy counts them in its window."""
    out = decision("--policy", "deploy/policy.example.yaml", "--xid", "94", "--node", "n1", *times)

    assert (out["outcome"], out["rule"]) == (outcome, "contained-ecc-repeats")
    assert reason_part in out["reason"] and len(out["request"]["occurrences"]) == 2


def test_the_example_policy_cordons_an_uncontained_double_bit_error_at_once() -> None:
    """Xid 48: NVIDIA's WORKFLOW_XID_48 resets the GPU at once (drain and reset with Xid 63/64), and the
    operations guide escalates a double-bit error at once (section 九)."""
    out = decision("--policy", "deploy/policy.example.yaml", "--xid", "48", "--node", "n1")

    assert (out["cordon"], out["outcome"], out["rule"]) == (True, "cordon", "double-bit-error")
    assert "cordon at once for Xid 48" in out["reason"]


def test_policy_test_refuses_a_bad_time_and_takes_relative_ones() -> None:
    proc = xidpipe("policy", "test", "--xid", "94", "--node", "n1", "--at", "the day before")
    assert proc.returncode == 2 and "--at: not a time: 'the day before' (examples: 24h" in proc.stderr
    out = decision("--policy", "deploy/policy.example.yaml", "--xid", "94", "--node", "n1", "--at", "20h",
                   "--at", "now")
    assert out["outcome"] == "cordon" and len(out["request"]["occurrences"]) == 2


def test_policy_test_with_a_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("dry_run: true\nrules: [{name: all-nvlink, match: {xids: [74]}, action: cordon_now}]\n")

    out = decision("--policy", str(path), "--xid", "74", "--node", "n1")

    assert (out["outcome"], out["rule"], out["dry_run"]) == ("cordon", "all-nvlink", True)


def test_breaker_status_and_reset(tmp_path: Path) -> None:
    log = tmp_path / "actions.jsonl"
    missing = xidpipe("breaker", "status", "--action-log", str(log))
    assert missing.returncode == 3 and "does not exist; give --action-log FILE, or --database-url" in missing.stderr
    JsonlActionStore(log).set_breaker(BreakerState())
    closed = xidpipe("breaker", "--action-log", str(log), "status")  # either side of the action
    JsonlActionStore(log).set_breaker(BreakerState(tripped=True, tripped_at=datetime.now(UTC), reason="pool full"))
    tripped = xidpipe("breaker", "status", "--action-log", str(log))
    reset = xidpipe("breaker", "reset", "--action-log", str(log), "--by", "ops", "--reason", "driver rolled back")
    after = xidpipe("breaker", "status", "--action-log", str(log))

    assert closed.returncode == 0 and json.loads(closed.stdout)["breaker"]["tripped"] is False
    assert tripped.returncode == 4 and json.loads(tripped.stdout)["breaker"]["reason"] == "pool full"
    assert reset.returncode == 0 and reset.stdout.startswith("breaker reset")
    state = json.loads(after.stdout)
    assert after.returncode == 0 and state["breaker"]["reset_by"] == "ops"
    assert state["history"][-1]["reason"] == "reset by ops: driver rolled back"


def test_release_without_a_cluster_is_refused_unless_a_dry_run(tmp_path: Path) -> None:
    log = tmp_path / "actions.jsonl"

    refused = xidpipe("node", "release", "n1", "--reason", "test", "--action-log", str(log))
    recorded = log.exists()
    proc = xidpipe("node", "release", "n1", "--reason", "test", "--by", "ops", "--action-log", str(log), "--dry-run")

    assert refused.returncode == 2 and refused.stdout == "" and not recorded
    assert "no cluster configured: give --kubeconfig FILE (and --context), --in-cluster" in refused.stderr
    assert proc.returncode == 0 and proc.stdout.startswith("dry run: no cluster configured")
    [rec] = JsonlActionStore(log).recent()
    assert (rec.action, rec.outcome, rec.actor) == ("release", "dry_run", "ops")


@pytest.mark.k8s
def test_node_release_as_the_worker(
    control_plane: Any, rbac_applied: Any, admin_core: client.CoreV1Api, make_node: NodeFactory,
    make_executor: ExecutorFactory, tmp_path: Path,
) -> None:
    ours = make_node(pool=unique("pool"))
    req = xid79(ours)
    make_executor().handle(req)
    human = make_node(pool=unique("pool"), unschedulable=True)
    cluster = ["--kubeconfig", str(control_plane.kubeconfig), "--context", "worker",
               "--action-log", str(tmp_path / "a.jsonl")]

    refused = xidpipe("node", "release", human, "--reason", "done", *cluster)
    wrong = xidpipe("node", "release", ours, "--incident", "other", "--reason", "done", *cluster)
    released = xidpipe("node", "release", ours, "--incident", req.incident_id, "--reason", "RMA done",
                       "--by", "alice", *cluster)

    assert refused.returncode == 4 and "cordoned, but not by xidpipe" in refused.stderr
    assert admin_core.read_node(human).spec.unschedulable is True
    assert wrong.returncode == 4 and "not other" in wrong.stderr
    assert released.returncode == 0, released.stderr
    node = admin_core.read_node(ours)
    assert not node.spec.unschedulable and node.metadata.annotations[ANN_RELEASED_BY] == "alice"
