"""`models.actions`, where every action request is built: a cordon candidate on every incident change
but a resolution (never for a workload or fleet incident), keyed by the incident's version; tickets and
notifications of openings, resolutions and reclassifications; the ticket update of a published repeat;
the evidence refresh. The stream policy has no cordon rules of its own any more."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from models.actions import action_requests, evidence_request
from models.incidents import IncidentChange, IncidentState
from models.stream_policy import PipelinePolicy

T0 = datetime(2026, 11, 30, 8, tzinfo=UTC)


def incident(**kw: object) -> IncidentState:
    base = IncidentState(incident_id="v2:x@1", fingerprint="v2:x", node="n", gpu="G", family="memory", status="open",
                         count=1, first_seen=T0, last_seen=T0, category="hardware")
    return replace(base, **kw)  # type: ignore[arg-type]


ACTIONS = [
    ("opened: cordon candidate first, ticket, notification", "opened", incident(),
     [("cordon_candidate", "cordon"), ("ticket", "create"), ("notification", "opened")]),
    ("a repeat below any threshold is still offered", "updated", incident(count=2), [("cordon_candidate", "cordon")]),
    ("an application fault on a GPU is offered: the policy says never", "updated",
     incident(family="application", category="application", count=50), [("cordon_candidate", "cordon")]),
    ("a workload incident is never offered", "opened",
     incident(family="application", category="application", component="workload"),
     [("ticket", "create"), ("notification", "opened")]),
    ("a fleet incident is never offered, and its growth asks nothing", "updated", incident(component="fleet"), []),
    ("a fleet incident opens with its ticket and its message", "opened", incident(component="fleet"),
     [("ticket", "create"), ("notification", "opened")]),
    ("a fleet incident's end is told", "resolved", incident(component="fleet", status="resolved"),
     [("notification", "resolved")]),
    ("reopened", "reopened", incident(family="driver", category="driver"),
     [("cordon_candidate", "cordon"), ("ticket", "reopen"), ("notification", "reopened")]),
    ("resolved: no cordon", "resolved", incident(status="resolved"), [("notification", "resolved")]),
    ("reclassified", "reclassified", incident(family="application", category="suspected_hardware", count=3),
     [("cordon_candidate", "cordon"), ("notification", "reclassified"), ("ticket", "comment:suspected_hardware")]),
]


@pytest.mark.parametrize(("kind", "inc", "want"), [a[1:] for a in ACTIONS], ids=[a[0] for a in ACTIONS])
def test_actions(kind: str, inc: IncidentState, want: list[tuple[str, str]]) -> None:
    got = action_requests(IncidentChange(kind, inc, "why"), version=4)  # type: ignore[arg-type]
    assert [(a.kind, a.operation) for a in got] == want
    assert len({a.idempotency_key for a in got}) == len(got)


def test_each_version_is_a_new_candidate_and_a_redelivery_the_same() -> None:
    def key(version: int) -> str:
        change = IncidentChange("updated", incident(count=version), "repeat")
        return next(a.idempotency_key for a in action_requests(change, version=version) if a.kind == "cordon_candidate")

    assert key(2) == "v2:x@1:cordon_candidate:v2"
    assert key(2) == key(2) and key(3) != key(2)


def test_a_published_repeat_asks_the_ticket_sink_to_update_once_per_version() -> None:
    change = IncidentChange("updated", incident(count=7), "7 faults; last Xid 48")
    held = action_requests(change, version=7)
    published = action_requests(change, version=7, repeat_published=True)
    assert [(a.kind, a.operation) for a in held] == [("cordon_candidate", "cordon")]
    assert [(a.kind, a.operation) for a in published] == [("cordon_candidate", "cordon"), ("ticket", "update:v7")]
    assert published[1].idempotency_key == "v2:x@1:ticket:update:v7" and published[1].reason == "7 faults; last Xid 48"
    # Only a repeat is one: an opening published at once asks for its ticket, not an update.
    opened = action_requests(IncidentChange("opened", incident(), "first"), version=1, repeat_published=True)
    assert [a.operation for a in opened if a.kind == "ticket"] == ["create"]


def test_evidence_asks_for_one_refresh_per_evidence_record() -> None:
    a = evidence_request("v2:x@1", "n", "G", "evidence:n:9")
    assert (a.kind, a.operation, a.incident_id, a.node, a.gpu) == ("ticket", "evidence", "v2:x@1", "n", "G")
    assert a.idempotency_key == "v2:x@1:ticket:evidence:evidence:n:9"
    assert evidence_request("v2:x@1", "n", "G", "evidence:n:10").idempotency_key != a.idempotency_key


@pytest.mark.parametrize("key", ["cordon_after_repeats", "immediate_cordon_families", "immediate_cordon_xids"])
def test_the_stream_policy_rejects_its_removed_cordon_keys_with_the_reason(key: str) -> None:
    with pytest.raises(ValueError, match=f"{key}: removed; cordons are decided by the YAML cordon policy"):
        PipelinePolicy.model_validate({key: 3})
    assert not hasattr(PipelinePolicy(), key)
