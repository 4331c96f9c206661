"""The incident lifecycle: which step may follow which, and who may take it."""

from __future__ import annotations

import pytest

from models.lifecycle import NEXT, STATES, check_transition


@pytest.mark.parametrize(("current", "to", "actor", "allowed"), [
    ("open", "mitigated", "responder", True),
    ("open", "ticketed", "responder", True),
    ("mitigated", "ticketed", "responder", True),
    ("ticketed", "mitigated", "responder", False),  # past it already: nothing to record
    ("mitigated", "mitigated", "responder", False),
    ("closed", "ticketed", "responder", False),
    ("ticketed", "repaired", "responder", True),  # the remediation loop returned the node after validation
    ("mitigated", "rma", "responder", True),  # the remediation ladder marked the card for RMA
    ("rma", "returned", "responder", False),  # people's steps
    ("open", "closed", "responder", False),
    ("open", "repaired", "person", True),
    ("mitigated", "repaired", "person", True),
    ("ticketed", "repaired", "person", True),
    ("ticketed", "rma", "person", True),
    ("repaired", "rma", "person", True),
    ("rma", "returned", "person", True),
    ("rma", "closed", "person", True),
    ("returned", "closed", "person", True),
    ("open", "closed", "person", True),
    ("open", "returned", "person", False),  # only a card sent back can return
    ("repaired", "returned", "person", False),
    ("rma", "repaired", "person", False),
    ("closed", "repaired", "person", False),
    ("closed", "closed", "person", False),
    ("open", "mitigated", "person", False),  # the responder's steps
    ("open", "ticketed", "person", False),
    ("open", "fixed", "person", False),
])
def test_transitions(current: str, to: str, actor: str, allowed: bool) -> None:
    verdict = check_transition(current, to, actor)  # type: ignore[arg-type]
    assert verdict.allowed is allowed, verdict.reason
    assert verdict.reason


def test_a_repeated_or_overtaken_step_is_recognised() -> None:
    assert check_transition("ticketed", "ticketed", "responder").already
    assert check_transition("repaired", "mitigated", "responder").already
    assert not check_transition("open", "returned", "person").already


def test_messages_name_what_is_allowed() -> None:
    v = check_transition("rma", "repaired", "person")
    assert "rma → repaired is not allowed" in v.reason and "returned, closed" in v.reason
    assert "closed is final" in check_transition("closed", "rma", "person").reason
    assert "unknown lifecycle state 'fixed'" in check_transition("open", "fixed", "person").reason


def test_the_lifecycle_only_moves_forward() -> None:
    for state, nexts in NEXT.items():
        assert all(STATES.index(n) > STATES.index(state) for n in nexts)
