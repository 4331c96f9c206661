"""The pure follow-up of a cordon attempt (retry with backoff, breaker hold, settled) and the
example policy deciding with occurrence times, as the responder and `xidpipe policy test` run it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from models.cordon import BreakerState, CordonRequest, FleetView, NodeView, decide_cordon
from models.cordon_policy import CordonPolicy
from models.cordon_retry import RetryBackoff, cordon_followup, incident_ended
from respond.cordon.policy_file import load_policy

T0 = datetime(2026, 11, 30, 8, tzinfo=UTC)
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "policy.example.yaml"


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_backoff_doubles_up_to_its_cap() -> None:
    b = RetryBackoff(initial_s=2, max_s=30)
    assert [b.delay_s(n) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]
    assert RetryBackoff().delay_s(10_000) == RetryBackoff().max_s


def follow(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {"ended": None, "outcome": "done", "decision": "cordon", "retryable": False,
                               "dry_run": False, "attempts": 0, "now": T0, "backoff": RetryBackoff(initial_s=2),
                               "reason": "r"}
    args.update(kw)
    return cordon_followup(**args)  # type: ignore[arg-type]


def test_a_retryable_failure_is_retried_later_each_time() -> None:
    first = follow(outcome="failed", decision=None, retryable=True, reason="API 503")
    third = follow(outcome="failed", decision=None, retryable=True, attempts=2)
    assert (first.kind, first.attempts, first.due_at) == ("retry", 1, T0 + timedelta(seconds=2))
    assert "API 503" in first.reason
    assert (third.kind, third.attempts, third.due_at) == ("retry", 3, T0 + timedelta(seconds=8))


@pytest.mark.parametrize(("kw", "kind"), [
    ({"outcome": "blocked", "decision": "trip_breaker"}, "breaker"),
    ({"outcome": "skipped", "decision": "breaker_open"}, "breaker"),
    ({"outcome": "dry_run", "decision": "trip_breaker", "dry_run": True}, "settled"),  # nothing was tripped
    ({"outcome": "failed", "decision": "node_missing"}, "settled"),  # not retryable
    ({"outcome": "skipped", "decision": "not_needed"}, "settled"),
    ({"outcome": "done", "decision": "cordon"}, "settled"),
    ({"ended": "the incident is resolved", "outcome": "failed", "retryable": True}, "settled"),
])
def test_what_is_left_pending(kw: dict[str, object], kind: str) -> None:
    assert follow(**kw).kind == kind


def test_a_policy_refusal_says_the_next_change_decides_again() -> None:
    got = follow(outcome="skipped", decision="not_needed", reason="rule nvlink-repeats: 2 occurrence(s)")
    assert got.kind == "settled" and "next change" in got.reason and "nvlink-repeats" in got.reason


def test_an_incident_ends_when_resolved_or_taken_over_by_people() -> None:
    assert incident_ended("open", "open") is None and incident_ended("open", "ticketed") is None
    assert incident_ended("resolved", "open") == "the incident is resolved"
    assert incident_ended("open", "repaired") == "the incident is repaired"


def request(xid: int, family: str, category: str, actions: tuple[str, ...], times: list[datetime]) -> CordonRequest:
    return CordonRequest(node="gpu-node-07", incident_id="inc", family=family, xids=(xid,), category=category,
                         immediate_actions=actions, count=len(times), first_seen=min(times), last_seen=max(times),
                         occurrences=tuple(times))


def decide(policy: CordonPolicy, req: CordonRequest) -> tuple[str, str | None]:
    d = decide_cordon(req, NodeView(name=req.node), FleetView(pool_nodes=100), BreakerState(), policy)
    return d.outcome, d.rule


def test_the_example_policy_cordons_contained_ecc_at_the_second_fault_within_a_day() -> None:
    policy = load_policy(EXAMPLE)

    def ecc(*hours: float) -> CordonRequest:
        return request(94, "memory", "hardware", ("RESTART_APP",), [h(x) for x in hours])

    assert decide(policy, ecc(0)) == ("not_needed", "contained-ecc-repeats")
    assert decide(policy, ecc(0, 20)) == ("cordon", "contained-ecc-repeats")
    assert decide(policy, ecc(0, 30)) == ("not_needed", "contained-ecc-repeats")  # a day and a half apart
    assert decide(policy, ecc(0, 30, 40)) == ("cordon", "contained-ecc-repeats")  # the later two


def test_an_nvlink_burst_refused_as_too_few_is_cordoned_on_the_next_burst() -> None:
    policy = load_policy(EXAMPLE)
    first = [h(0), h(0) + timedelta(minutes=1)]
    second = [*first, h(0) + timedelta(minutes=40)]
    assert decide(policy, request(74, "nvlink", "interconnect", ("WORKFLOW_NVLINK_ERR",), first)) == (
        "not_needed", "nvlink-repeats")
    assert decide(policy, request(74, "nvlink", "interconnect", ("WORKFLOW_NVLINK_ERR",), second)) == (
        "cordon", "nvlink-repeats")


def test_occurrence_times_decide_where_a_count_over_the_span_would_not() -> None:
    """Three NVLink faults in ten minutes, then quiet for a day and one more: the span spreads four over a
    day (under three an hour); the times show the burst is a day old, so no cordon either way, but two
    faults ten minutes ago and one now do cordon."""
    policy = CordonPolicy()
    old = [h(0), h(0.1), h(0.2), h(24)]
    assert decide(policy, request(74, "nvlink", "interconnect", (), old))[0] == "not_needed"
    recent = [h(0), h(23.8), h(23.9), h(24)]
    assert decide(policy, request(74, "nvlink", "interconnect", (), recent))[0] == "cordon"
    spread = request(74, "nvlink", "interconnect", (), recent).model_copy(update={"occurrences": ()})
    assert decide(policy, spread)[0] == "not_needed"  # without the times: 4 over a day


def test_the_longest_window_bounds_what_the_responder_reads() -> None:
    assert CordonPolicy().longest_window_s() == 86400
    assert CordonPolicy(rules=()).longest_window_s() == 0
