"""The step registry: which steps a decision's plan runs, in which order, and what a registration may add."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from models.cordon import ANN_CORDONED_AT, ANN_INCIDENT, ANN_OCCURRENCES, CordonDecision, CordonRequest, NodeView
from models.cordon_policy import CordonPolicy, Drain
from respond.cordon import steps
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REQ = CordonRequest(node="n1", incident_id="inc-1", family="gpu_lost", xids=(79,), count=2, first_seen=T0,
                    last_seen=T0)
DRAIN = CordonPolicy(drain=Drain(enabled=True))


@pytest.mark.parametrize(("trigger", "policy", "names"), [
    ("cordon", CordonPolicy(), ["cordon", "condition", "event"]),
    ("cordon", DRAIN, ["cordon", "condition", "event", "evict"]),
    ("resume", DRAIN, ["condition", "event"]),  # the drain follows a fresh cordon only
    ("repeat", DRAIN, ["repeat"]),
])
def test_the_plan_of_each_trigger(trigger: Trigger, policy: CordonPolicy, names: list[str]) -> None:
    planned = steps.plan(trigger, policy)
    assert [s.name for s in planned] == names
    writes = 0 if trigger == "resume" else 1  # the decision step first (a resume has no decision to write)
    assert [s.phase for s in planned] == ["decision"] * writes + ["after"] * (len(names) - writes)


def held(incident: str, occurrences: int = 1) -> NodeView:
    return NodeView(name="n1", unschedulable=True, annotations={
        ANN_CORDONED_AT: T0.isoformat(), ANN_INCIDENT: incident, ANN_OCCURRENCES: str(occurrences)})


@pytest.mark.parametrize(("outcome", "view", "trigger"), [
    ("cordon", NodeView(name="n1"), "cordon"),
    ("repeat", held("inc-1"), "repeat"),
    ("already_cordoned", held("inc-1", 2), "resume"),
    ("already_cordoned", held("inc-0"), None),  # another incident's cordon: nothing of this one to complete
    ("foreign_cordon", NodeView(name="n1", unschedulable=True), None),
    ("trip_breaker", NodeView(name="n1"), None),
    ("not_needed", NodeView(name="n1"), None),
])
def test_which_decisions_start_a_plan(outcome: Any, view: NodeView, trigger: Trigger | None) -> None:
    assert steps.trigger_of(CordonDecision(outcome=outcome, reason="r"), view, REQ) == trigger


class Mark:
    name = "mark"
    port = object
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"cordon"})
    own_record = True

    def idempotency_key(self, req: CordonRequest) -> str:
        return req.incident_id

    def applies(self, policy: CordonPolicy) -> bool:
        return policy.drain.enabled

    def run(self, port: Any, ctx: StepContext) -> StepRecord:
        return StepRecord(step=self.name, outcome="done")


@pytest.fixture
def mark() -> Iterator[Mark]:
    step = Mark()
    steps.register(step)
    yield step
    steps.unregister(step.name)


def test_a_registered_step_runs_last_and_only_where_it_applies(mark: Mark) -> None:
    assert [s.name for s in steps.plan("cordon", DRAIN)][-1] == "mark"
    assert "mark" not in [s.name for s in steps.plan("cordon", CordonPolicy())]
    steps.unregister("mark")
    assert "mark" not in [s.name for s in steps.plan("cordon", DRAIN)]


def renamed(name: str, **attrs: Any) -> Mark:
    step = Mark()
    step.name = name
    for key, value in attrs.items():
        setattr(step, key, value)
    return step


@pytest.mark.parametrize(("step", "why"), [
    (renamed("evict"), "registered already"),
    (renamed("release"), "action kind"),  # the executor's own
    (renamed("x" * 33), "action kind"),  # the action record's column
    (renamed("reset", phase="decision"), "one step each"),  # the cordon has its decision step
    (renamed("reset", phase="decision", triggers=frozenset({"resume"})), "one step each"),
])
def test_a_registration_that_would_be_ambiguous_is_refused(step: Mark, why: str) -> None:
    before = [s.name for s in steps.STEPS]
    with pytest.raises(ValueError, match=why):
        steps.register(step)
    assert [s.name for s in steps.STEPS] == before
