"""What a paging destination is told about one incident, and when (`models.paging.decide_pages`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.account import ActionItem
from models.dossier import CodeInfo, Dossier, DossierGpu
from models.paging import (
    PageDecision,
    PageFacts,
    PageKind,
    PageLog,
    PagePolicy,
    Step,
    alert_key,
    cordon_steps,
    decide_pages,
    event_id,
    facts_of,
    revision,
)
from models.severity import Severity

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
ID = "v1:3f2a9c0d11223344@20261127T030000.000000Z"
REV_A, REV_B = revision({"title": "a"}), revision({"title": "b"})
CORDON = Step("cordon@1", "cordon", T0, "cordon done", "cordon", "done")
RELEASE = Step("release@2", "cordon", T0 + timedelta(hours=1), "release done", "release", "done")
REMEDIATE = Step("loop:drain", "remediation", T0, "drain started", "drain", "done")
AM = PagePolicy(resend=timedelta(minutes=1))
MIN_ERROR = PagePolicy(min_severity=Severity.ERROR)


def facts(status: str = "firing", sev: Severity = Severity.CRITICAL, rev: str = REV_A,
          steps: tuple[Step, ...] = ()) -> PageFacts:
    return PageFacts(ID, "resolved" if status == "resolved" else "firing", sev, rev, steps)


def told(status: str = "firing", rev: str = REV_A, steps: frozenset[str] = frozenset(), ago_s: float = 10,
         generation: int = 1) -> PageLog:
    return PageLog("resolved" if status == "resolved" else "firing", rev, steps, T0 - timedelta(seconds=ago_s),
                   generation)


def kinds(d: PageDecision) -> list[tuple[str, str]]:
    return [(str(i.kind), i.key) for i in d.items]


@pytest.mark.parametrize(("name", "f", "t", "policy", "extra", "want", "gen"), [
    ("opened", facts(), None, PagePolicy(), (), [("opened", "open:1")], 1),
    ("opened with its steps", facts(steps=(CORDON,)), None, PagePolicy(), (),
     [("opened", "open:1"), ("cordon", "cordon@1")], 1),
    ("changed", facts(rev=REV_B), told(), PagePolicy(), (), [("changed", f"1:{REV_B}")], 1),
    ("unchanged: nothing", facts(), told(), PagePolicy(), (), [], 1),
    ("a new step only", facts(steps=(CORDON, RELEASE)), told(steps=frozenset({"cordon@1"})), PagePolicy(), (),
     [("cordon", "release@2")], 1),
    ("changed before its steps", facts(rev=REV_B, steps=(CORDON,)), told(), PagePolicy(), (),
     [("changed", f"1:{REV_B}"), ("cordon", "cordon@1")], 1),
    ("a remediation transition", facts(), told(), PagePolicy(), (REMEDIATE,), [("remediation", "loop:drain")], 1),
    ("a step handed twice is told once", facts(steps=(CORDON,)), told(), PagePolicy(), (CORDON,),
     [("cordon", "cordon@1")], 1),
    ("resolved after its steps", facts("resolved", steps=(CORDON,)), told(), PagePolicy(), (),
     [("cordon", "cordon@1"), ("resolved", "resolved:1")], 1),
    ("resolved before ever told", facts("resolved"), None, PagePolicy(), (), [], 1),
    ("resolved and told so", facts("resolved"), told("resolved"), PagePolicy(), (), [], 1),
    ("a release after the resolution was told", facts("resolved", steps=(CORDON, RELEASE)),
     told("resolved", steps=frozenset({"cordon@1"})), PagePolicy(), (), [("cordon", "release@2")], 1),
    ("reopened after its resolve: a new alert", facts(), told("resolved"), PagePolicy(), (), [("opened", "open:2")], 2),
    ("reopened a second time", facts(), told("resolved", generation=2), PagePolicy(), (), [("opened", "open:3")], 3),
    ("resolved again after a reopen", facts("resolved"), told(generation=2), PagePolicy(), (),
     [("resolved", "resolved:2")], 2),
    ("below the minimum: not paged", facts(sev=Severity.WARNING), None, MIN_ERROR, (), [], 1),
    ("at the minimum: paged", facts(sev=Severity.ERROR), None, MIN_ERROR, (), [("opened", "open:1")], 1),
    ("below the minimum, reopened: not paged", facts(sev=Severity.INFO), told("resolved"), MIN_ERROR, (), [], 1),
    ("open, then less urgent: still told", facts(sev=Severity.INFO, rev=REV_B), told(), MIN_ERROR, (),
     [("changed", f"1:{REV_B}")], 1),
    ("resend due", facts(), told(ago_s=60), AM, (), [("refresh", f"1@{(T0 - timedelta(seconds=60)).isoformat()}")], 1),
    ("resend not due yet", facts(), told(ago_s=59), AM, (), [], 1),
    ("no resend without a policy", facts(), told(ago_s=86400), PagePolicy(), (), [], 1),
    ("no resend of a resolved alert", facts("resolved"), told("resolved", ago_s=86400), AM, (), [], 1),
])
def test_what_is_told(name: str, f: PageFacts, t: PageLog | None, policy: PagePolicy, extra: tuple[Step, ...],
                      want: list[tuple[str, str]], gen: int) -> None:
    d = decide_pages(f, t, T0, policy, extra)
    assert kinds(d) == want, d.reason
    assert d.generation == gen
    assert d.reason


def test_the_reasons_say_why() -> None:
    assert "below" in decide_pages(facts(sev=Severity.INFO), None, T0, MIN_ERROR).reason
    assert "new alert" in decide_pages(facts(), told("resolved"), T0, PagePolicy()).reason
    assert "never" in decide_pages(facts("resolved"), None, T0, PagePolicy()).reason


def test_a_firing_alert_is_resent_within_the_interval_alertmanager_needs() -> None:
    opened = decide_pages(facts(), None, T0, AM)
    assert opened.resend_at == T0 + timedelta(minutes=1)
    waiting = decide_pages(facts(), told(ago_s=45), T0, AM)
    assert waiting.items == () and waiting.resend_at == T0 + timedelta(seconds=15)
    assert decide_pages(facts("resolved"), told(), T0, AM).resend_at is None


def test_each_refresh_is_a_new_event_and_each_retry_the_same() -> None:
    first = decide_pages(facts(), told(ago_s=60), T0, AM).items[0]
    retried = decide_pages(facts(), told(ago_s=60), T0 + timedelta(seconds=5), AM).items[0]
    later = decide_pages(facts(), told(ago_s=0), T0 + timedelta(minutes=1), AM).items[0]
    assert event_id(ID, first.kind, first.key) == event_id(ID, retried.kind, retried.key)
    assert event_id(ID, first.kind, first.key) != event_id(ID, later.kind, later.key)


def test_event_ids_are_stable_and_distinct() -> None:
    a = event_id(ID, PageKind.OPENED, "open:1")
    assert a == event_id(ID, PageKind.OPENED, "open:1") and len(a) == 32 and int(a, 16) >= 0
    others = {event_id(ID, PageKind.OPENED, "open:2"), event_id(ID, PageKind.RESOLVED, "open:1"),
              event_id(ID.replace("@", "#"), PageKind.OPENED, "open:1")}
    assert a not in others and len(others) == 3


def test_a_reopened_incident_is_a_new_alert_key() -> None:
    assert alert_key(ID, 1) == ID
    assert alert_key(ID, 2) != ID and alert_key(ID, 2) != alert_key(ID, 3)


def test_the_revision_ignores_order_and_sees_every_part() -> None:
    assert revision({"a": 1, "b": 2}) == revision({"b": 2, "a": 1})
    assert revision({"a": 1, "b": 2}) != revision({"a": 1, "b": 3})


def test_cordon_steps_are_the_recorded_cluster_actions_oldest_first() -> None:
    acts = [ActionItem(at=T0 + timedelta(minutes=5), action="release", outcome="done"),
            ActionItem(at=T0, action="cordon", outcome="dry_run", dry_run=True, reason="Xid 79: GPU lost"),
            ActionItem(at=T0, action="ticket", outcome="done")]
    steps = cordon_steps(acts)
    assert [s.action for s in steps] == ["cordon", "release"]
    assert steps[0].text == "cordon dry run (dry run): Xid 79: GPU lost"
    assert steps[0].key != steps[1].key and steps[0].kind == "cordon"


def dossier(status: str = "open", family: str = "gpu_lost", codes: tuple[str, ...] = ("79",),
            count: int = 1, actions: tuple[ActionItem, ...] = ()) -> Dossier:
    return Dossier(incident_id=ID, fingerprint="v1:3f2a9c0d11223344", cluster="train-a", node="gpu-node-03",
                   family=family, category="hardware", reason="GPU has fallen off the bus", status=status, count=count,
                   first_seen=T0, last_seen=T0, catalog_version="r570",
                   codes=[CodeInfo(code=c, count=count, mnemonic="X") for c in codes],
                   gpu=DossierGpu(index=2, uuid="GPU-6a1e"), actions=list(actions))


def test_the_facts_of_a_dossier() -> None:
    base = facts_of(dossier())
    assert (base.incident_id, base.status, base.severity) == (ID, "firing", Severity.CRITICAL)
    assert facts_of(dossier(status="resolved")).status == "resolved"
    assert facts_of(dossier(count=7)).revision == base.revision  # more of the same faults: not news for a pager
    assert facts_of(dossier(codes=("79", "48"))).revision != base.revision
    held = dossier(family="memory", actions=(ActionItem(at=T0, action="cordon", outcome="blocked",
                                                        decision="cordon", reason="breaker open"),))
    assert facts_of(held).revision != facts_of(dossier(family="memory")).revision  # the decision is part of it
    assert [s.action for s in facts_of(held).steps] == ["cordon"]
