"""Ticket decisions: create / comment / reopen / link / attach / none, each with its reason."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from models.severity import Severity
from models.ticket_policy import (
    TicketPolicy,
    TicketState,
    TicketSubject,
    decide_ticket,
    fingerprint_label,
    incident_label,
    label_safe,
    ticket_fields,
)

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
POLICY = TicketPolicy(comment_interval_s=3600)
S = TicketSubject(incident_id="v1:aa@1", fingerprint="v1:aa", category="hardware", family="gpu_lost",
                  node="gpu-node-03", status="open", count=1, last_seen=T0, node_pool="h100-train",
                  gpu_model="NVIDIA H100 80GB HBM3", evidence=frozenset({"dossier.md", "dossier.json"}),
                  severity=Severity.CRITICAL)
ST = TicketState(key="GPU-1", created_at=T0, category="hardware", count=1,
                 attached=frozenset({"dossier.md", "dossier.json"}))


def subj(**kw: object) -> TicketSubject:
    return replace(S, **kw)  # type: ignore[arg-type]


def st(**kw: object) -> TicketState:
    return replace(ST, **kw)  # type: ignore[arg-type]


CASES = [
    # name, subject, state, previous, now, policy, action, key, in_reason
    ("first hardware fault opens a ticket", S, None, None, T0, POLICY, "create", None, "first ticket"),
    ("driver faults get a ticket", subj(category="driver"), None, None, T0, POLICY, "create", None, "driver"),
    ("fleet bursts get a ticket", subj(category="fleet"), None, None, T0, POLICY, "create", None, "fleet"),
    ("interconnect gets a ticket", subj(category="interconnect"), None, None, T0, POLICY, "create", None, ""),
    ("suspected hardware gets a ticket", subj(category="suspected_hardware"), None, None, T0, POLICY, "create",
     None, ""),
    ("application faults get none by default", subj(category="application"), None, None, T0, POLICY, "none", None,
     "ticket_application is off"),
    ("application faults when the policy says so", subj(category="application"), None, None, T0,
     TicketPolicy(ticket_application=True), "create", None, "enabled by policy"),
    ("unknown class gets none", subj(category="unknown"), None, None, T0, POLICY, "none", None, "no ticket"),
    ("resolved before any ticket", subj(status="resolved"), None, None, T0, POLICY, "none", None,
     "resolved before"),
    ("redelivery changes nothing", S, ST, None, T0 + HOUR * 2, POLICY, "none", "GPU-1", "nothing new"),
    ("repeat within the interval is rate-limited", subj(count=5), st(), None, T0 + timedelta(minutes=10), POLICY,
     "none", "GPU-1", "rate-limited"),
    ("repeat after the interval is a comment", subj(count=5), st(), None, T0 + HOUR, POLICY, "comment", "GPU-1",
     "4 repeat(s)"),
    ("interval counts from the last comment", subj(count=9), st(count=5, last_comment_at=T0 + HOUR), None,
     T0 + HOUR + timedelta(minutes=30), POLICY, "none", "GPU-1", "rate-limited"),
    ("a zero interval comments every repeat", subj(count=2), st(), None, T0, TicketPolicy(comment_interval_s=0),
     "comment", "GPU-1", "1 repeat"),
    ("reclassification is told at once", subj(category="suspected_hardware"), st(category="hardware"), None,
     T0 + timedelta(minutes=1), POLICY, "comment", "GPU-1", "reclassified from hardware to suspected_hardware"),
    ("late evidence is attached", subj(evidence=S.evidence | {"node-lspci.txt"}), st(), None, T0 + timedelta(minutes=1),
     POLICY, "attach", "GPU-1", "1 evidence file"),
    ("late evidence while repeats are rate-limited", subj(count=3, evidence=S.evidence | {"node-lspci.txt"}), st(),
     None, T0 + timedelta(minutes=1), POLICY, "attach", "GPU-1", "rate-limited until"),
    ("new faults on a ticket someone resolved reopen it", subj(count=2), st(resolved=True), None,
     T0 + timedelta(minutes=1), POLICY, "reopen", "GPU-1", "after ticket GPU-1 was resolved"),
    ("a resolved ticket with nothing new stays resolved", S, st(resolved=True), None, T0 + HOUR, POLICY, "none",
     "GPU-1", "nothing new"),
    ("recurrence after resolution reopens", subj(incident_id="v1:aa@2", previous_incident_id="v1:aa@1"), None,
     st(resolved=True), T0, POLICY, "reopen", "GPU-1", "recurrence of v1:aa@1"),
    ("recurrence after resolution links when the policy says so",
     subj(incident_id="v1:aa@2", previous_incident_id="v1:aa@1"), None, st(resolved=True), T0,
     TicketPolicy(recurrence="link"), "link", "GPU-1", "new ticket linked"),
    ("recurrence while the old ticket is open is a comment there",
     subj(incident_id="v1:aa@2", previous_incident_id="v1:aa@1"), None, st(), T0, POLICY, "comment", "GPU-1",
     "still open"),
    ("recurrence of an application fault gets none", subj(category="application", previous_incident_id="v1:aa@1"),
     None, st(resolved=True), T0, POLICY, "none", None, "ticket_application is off"),
]


@pytest.mark.parametrize(("name", "s", "state", "previous", "now", "policy", "action", "key", "in_reason"), CASES,
                         ids=[c[0] for c in CASES])
def test_decide_ticket(name: str, s: TicketSubject, state: TicketState | None, previous: TicketState | None,
                       now: datetime, policy: TicketPolicy, action: str, key: str | None, in_reason: str) -> None:
    d = decide_ticket(s, state, previous, now, policy)
    assert d.action == action, d.reason
    assert d.key == key
    assert in_reason in d.reason
    assert d.reason


def test_rate_limited_repeat_says_when_and_folds_into_the_next_comment() -> None:
    held = decide_ticket(subj(count=4), st(), None, T0 + timedelta(minutes=5), POLICY)
    assert held.action == "none" and held.not_before == T0 + HOUR
    later = decide_ticket(subj(count=7), st(), None, T0 + HOUR, POLICY)
    assert later.action == "comment" and later.comment is not None and "6 more occurrence(s)" in later.comment


def test_create_attaches_all_evidence_and_carries_fields() -> None:
    d = decide_ticket(subj(evidence=frozenset({"a.txt", "dossier.md"})), None, None, T0, POLICY)
    assert d.attach == ("a.txt", "dossier.md")
    assert d.fields is not None and fingerprint_label("v1:aa") in d.fields.labels


@pytest.mark.parametrize(
    ("s", "policy", "project", "issue_type", "priority", "components", "labels"),
    [
        (S, POLICY, "GPU", "Bug", "Highest", ("gpu-hardware",),
         ("xidpipe", "xidpipe-fp-v1-aa", "xidpipe-inc-v1-aa-1", "xidpipe-hardware", "xidpipe-family-gpu_lost",
          "pool-h100-train", "gpu-nvidia-h100-80gb-hbm3")),
        (subj(family="xid_app", category="application", node_pool=None, gpu_model=None, severity=Severity.INFO), POLICY,
         "GPU", "Bug", "Low",
         ("gpu-workloads",), ("xidpipe", "xidpipe-fp-v1-aa", "xidpipe-inc-v1-aa-1", "xidpipe-application",
                              "xidpipe-family-xid_app")),
        (subj(family="nvlink", category="interconnect", severity=Severity.ERROR),
         TicketPolicy(project_by_pool={"h100-train": "TRAIN"}, components_by_pool={"h100-train": ["rack-b"]},
                      issue_type_by_category={"interconnect": "Incident"}, labels=("gpu",)),
         "TRAIN", "Incident", "High", ("nvlink-fabric", "rack-b"),
         ("gpu", "xidpipe-fp-v1-aa", "xidpipe-inc-v1-aa-1", "xidpipe-interconnect", "xidpipe-family-nvlink",
          "pool-h100-train", "gpu-nvidia-h100-80gb-hbm3")),
        (subj(family="memory", category="suspected_hardware", severity=Severity.ERROR), POLICY, "GPU", "Bug", "High",
         ("gpu-hardware",), None),
        (subj(family="driver", category="driver", severity=Severity.WARNING), POLICY, "GPU", "Bug", "Medium",
         ("gpu-driver",), None),
        (subj(severity=Severity.INFO), TicketPolicy(priority_by_severity={"info": "P5"}), "GPU", "Bug", "P5",
         ("gpu-hardware",), None),
    ],
)
def test_ticket_fields(s: TicketSubject, policy: TicketPolicy, project: str, issue_type: str, priority: str,
                       components: tuple[str, ...], labels: tuple[str, ...] | None) -> None:
    f = ticket_fields(s, policy)
    assert (f.project, f.issue_type, f.priority, f.components) == (project, issue_type, priority, components)
    if labels is not None:
        assert f.labels == labels
    assert all(" " not in x and x == x.lower() for x in f.labels)


@pytest.mark.parametrize(("text", "label"), [
    ("v1:3f2a9c", "v1-3f2a9c"), ("NVIDIA A100-SXM4 80GB", "nvidia-a100-sxm4-80gb"), ("  ", "unknown"),
    ("a/b\\c\"d", "a-b-c-d"),
])
def test_labels_are_jira_safe(text: str, label: str) -> None:
    assert label_safe(text) == label


def test_incident_and_fingerprint_labels_differ() -> None:
    assert fingerprint_label("v1:aa") == "xidpipe-fp-v1-aa"
    assert incident_label("v1:aa@20261127T030000.000000Z") == "xidpipe-inc-v1-aa-20261127t030000.000000z"


@pytest.mark.parametrize("settings", [
    {"priority_by_severity": {"urgent": "High"}},
    {"components_by_category": {"nvlink": ["fabric"]}},  # a family, not a category
    {"categories": ["hardware", "everything"]},
])
def test_a_policy_naming_a_class_outside_the_vocabulary_is_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        TicketPolicy.model_validate(settings)


def test_a_policy_keeps_its_names_as_plain_strings_in_json() -> None:
    policy = TicketPolicy.model_validate({"categories": ["hardware", "fleet"], "issue_type_by_category": {
        "fleet": "Incident"}})
    dumped = policy.model_dump(mode="json")
    assert sorted(dumped["categories"]) == ["fleet", "hardware"] and dumped["issue_type_by_category"] == {
        "fleet": "Incident"}
    assert dumped["priority_by_severity"] == {"critical": "Highest", "error": "High", "warning": "Medium",
                                              "info": "Low"}
    assert ticket_fields(subj(category="fleet"), policy).issue_type == "Incident"
    assert decide_ticket(subj(category="driver"), None, None, T0, policy).action == "none"


@pytest.mark.parametrize("old", ["priority_by_family", "priority_by_category", "default_priority"])
def test_the_replaced_priority_settings_say_what_replaced_them(old: str) -> None:
    with pytest.raises(ValidationError, match="replaced by priority_by_severity"):
        TicketPolicy.model_validate({old: {}})


OWNED = TicketPolicy(owners={"gpu-infra": {"assignee": "oncall-gpu", "components": ["dc-east"]},
                             "team-vision": {"assignee": "vision-lead"}},
                     team_by_pool={"a100-infer": "inference-infra"}, infra_team="gpu-infra")


@pytest.mark.parametrize(("s", "assignee", "components"), [
    (S, "oncall-gpu", ("gpu-hardware", "dc-east")),  # hardware: the infrastructure team
    (subj(category="application", family="application", owner="team-vision"), "vision-lead", ("gpu-workloads",)),
    (subj(category="application", family="application", owner="team-nlp"), None, ("gpu-workloads",)),  # not routed
    (subj(node_pool="a100-infer"), None, ("gpu-hardware",)),  # its pool's team has no route
])
def test_assignee_and_components_come_from_the_owner_routing(s: TicketSubject, assignee: str | None,
                                                             components: tuple[str, ...]) -> None:
    f = ticket_fields(s, OWNED)
    assert (f.assignee, f.components) == (assignee, components)
    assert ticket_fields(s, POLICY).assignee is None  # no routing configured: nobody is assigned
