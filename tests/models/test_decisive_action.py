"""An incident's NVIDIA action is the most severe of its codes' (`models.decisive_action`), in the
runbook's order, and its reason names the decisive evidence (`models.grouping.decisive_evidence`)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from models.decisive_action import action_rank, decisive_action, decisive_evidence, decisive_of_stored, duration
from models.incidents import IncidentState
from models.runbook import load_runbook
from models.vocabulary import CodeKind, FaultCode
from tests.streams.records import T0


def xids(*numbers: int) -> list[FaultCode]:
    return [FaultCode(CodeKind.XID, n) for n in numbers]


@pytest.mark.parametrize(("codes", "code", "action"), [
    # The demo's failing GPU: jobs crashed (Xid 13, RESTART_APP), a contained error (Xid 94, RESTART_APP),
    # then the double-bit error (Xid 48) and its row remapping (Xid 63, IGNORE): NVIDIA's action is Xid 48's.
    ((13, 13, 94, 48, 63), 48, "WORKFLOW_XID_48"),
    ((48, 63, 95, 45), 48, "WORKFLOW_XID_48"),  # the DBE ranks before RESET_GPU (95) in the runbook's order
    ((95, 45), 95, "RESET_GPU"),
    ((74, 79), 79, "RESTART_BM"),
    ((13, 43), 13, "RESTART_APP"),  # a tie of ranks goes to the code listed first ... (43 is IGNORE)
    ((31, 13), 31, "RESTART_APP"),  # ... as here
    # "Not Solo: IGNORE (follow other Xid)" and "Informational only regarding another Xid": Xid 45 and Xid 154
    # decide only when no other code has an action.
    ((94, 45), 94, "RESTART_APP"),
    ((119, 154), 119, "RESET_GPU"),
    ((45,), 45, "WORKFLOW_XID_45"),
    ((154,), 154, "XID_154"),
])
def test_the_most_drastic_action_decides(codes: tuple[int, ...], code: int, action: str) -> None:
    found = decisive_action(xids(*codes))
    assert found is not None and (found.code.number, found.action) == (code, action), found


def test_codes_without_an_action_never_decide_and_none_is_no_decision() -> None:
    assert decisive_action(xids(171, 172)) is None  # "(none published)"
    assert decisive_action([FaultCode(CodeKind.SXID, 12028)]) is None
    found = decisive_of_stored(["AER", "Xid 79", "fallen off the bus", "driver_error"])
    assert found is not None and found.code == FaultCode(CodeKind.XID, 79)


def test_the_order_is_the_runbook_s() -> None:
    order = load_runbook().order
    assert [action_rank(a) for a in order] == list(range(len(order)))
    assert action_rank("NO_SUCH_ACTION") == len(order)
    reversed_order = tuple(reversed(order))
    found = decisive_action(xids(48, 13), order=reversed_order)
    assert found is not None and found.action == "RESTART_APP"


def state(codes: tuple[str, ...], span_s: float, family: str = "memory") -> IncidentState:
    return IncidentState(incident_id="i", fingerprint="f", node="n", gpu="G", family=family, status="open", count=4,
                         first_seen=T0, last_seen=T0 + timedelta(seconds=span_s), codes=codes)


def test_the_reason_names_the_decisive_evidence() -> None:
    ev = decisive_evidence(state(("Xid 13", "Xid 94", "Xid 48", "Xid 63"), 20 * 3600), ["a", "b", "c", "a"])
    assert ev is not None
    # NVIDIA's action for the decisive code is its workflow's decision: WORKFLOW_XID_48 "w/ 63 or 64: DRAIN_AND_RESET".
    assert ev.lead() == ("the GPU failed 3 different jobs in 20 h (Xid 13), then Xid 48 (Double Bit ECC Error; "
                         "NVIDIA: WORKFLOW_XID_48 → DRAIN_AND_RESET: w/ 63 or 64 (Xid 63): DRAIN_AND_RESET; the line "
                         "names no unit: RUN_FIELDDIAG)")
    alone = decisive_evidence(state(("Xid 95", "Xid 45"), 1), [])
    assert alone is not None and alone.lead() == "Xid 95 (Uncontained memory error; NVIDIA: RESET_GPU)"
    assert decisive_evidence(state(("SXid 12028",), 0, "nvswitch"), []) is None


@pytest.mark.parametrize(("seconds", "text"), [(45, "45 s"), (3000, "50 min"), (72000, "20 h"), (3 * 86400, "3 d")])
def test_durations_in_the_unit_people_say(seconds: float, text: str) -> None:
    assert duration(seconds) == text
