"""The decisive code: the code whose NVIDIA action comes first in the runbook's order decides."""

from __future__ import annotations

import pytest

from models.catalog import load_catalog
from models.decisive import CodeFacts, decisive
from models.runbook import load_runbook

ORDER = load_runbook().order


def facts(*codes: str, messages: dict[str, str] | None = None) -> list[CodeFacts]:
    cat = load_catalog()
    out = []
    for code in codes:
        kind, _, number = code.partition(" ")
        info = cat.xid(int(number)) if kind == "Xid" else None
        out.append(CodeFacts(code, info.immediate_action if info else None, (messages or {}).get(code)))
    return out


def test_the_dbe_incident_leads_with_xid_48_not_the_xid_13_seen_first() -> None:
    d = decisive(facts("Xid 13", "Xid 94", "Xid 48", "Xid 63"), ORDER)
    assert (d.code, d.key, d.action) == ("Xid 48", "WORKFLOW_XID_48", "WORKFLOW_XID_48")
    assert d.codes_first(["Xid 13", "Xid 94", "Xid 48", "Xid 63"]) == ["Xid 48", "Xid 13", "Xid 94", "Xid 63"]
    assert "Xid 48" in d.reason and "Xid 13" in d.reason


@pytest.mark.parametrize(("codes", "code", "key"), [
    (("AER", "Xid 79", "fallen off the bus", "driver_error"), "Xid 79", "RESTART_BM"),  # unnumbered reports never lead
    (("Xid 74",), "Xid 74", "WORKFLOW_NVLINK_ERR"),
    (("Xid 45", "Xid 13"), "Xid 13", "RESTART_APP"),  # NVIDIA: Xid 45 "Not Solo: IGNORE (follow other Xid)"
    (("Xid 45",), "Xid 45", "WORKFLOW_XID_45"),  # alone, its own workflow decides
    (("Xid 63", "Xid 94"), "Xid 94", "RESTART_APP"),  # IGNORE ranks below a contained error
    (("Xid 13", "Xid 31"), "Xid 13", "RESTART_APP"),  # a tie: the code seen first
    (("fallen off the bus",), "fallen off the bus", None),  # nothing keyed: the first code
    ((), None, None),
])
def test_the_most_drastic_action_decides(codes: tuple[str, ...], code: str | None, key: str | None) -> None:
    d = decisive(facts(*codes), ORDER)
    assert (d.code, d.key) == (code, key)


def test_xid_154_follows_the_fault_it_reports_on_and_its_recovery_is_kept() -> None:
    reboot = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    reset = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    # NVIDIA: Xid 154 is "Informational only regarding another Xid": the Xid 119 decides, and the
    # driver's current instruction (a node reboot) is kept beside it for the runbook's vendor step.
    d = decisive(facts("Xid 119", "Xid 154", messages={"Xid 154": reboot}), ORDER)
    assert (d.code, d.key) == ("Xid 119", "RESET_GPU")
    assert d.recovery is not None and (d.recovery.name, d.recovery.text) == ("NODE_REBOOT", "Node Reboot Required")
    d = decisive(facts("Xid 119", "Xid 154", messages={"Xid 154": reset}), ORDER)
    assert (d.code, d.key) == ("Xid 119", "RESET_GPU") and d.recovery is not None
    assert d.recovery.text == "GPU Reset Required"
    # Alone, an Xid 154 decides by the recovery it names; a line that names none (truncated): NVIDIA's XID_154.
    d = decisive(facts("Xid 154", messages={"Xid 154": reboot}), ORDER)
    assert (d.code, d.key, d.action) == ("Xid 154", "RESTART_BM", "XID_154: Node Reboot Required")
    d = decisive(facts("Xid 154", messages={"Xid 154": "GPU recovery action changed from"}), ORDER)
    assert (d.code, d.key, d.recovery) == ("Xid 154", "XID_154", None)
