"""The decisive code: the code whose NVIDIA action comes first in the runbook's order decides."""

from __future__ import annotations

import pytest

from models.catalog import load_catalog
from models.decisive import CodeFacts, decisive, recovery_of
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
    (("Xid 45", "Xid 13"), "Xid 45", "WORKFLOW_XID_45"),  # NVIDIA: Xid 45 follows the other Xid (its own workflow)
    (("Xid 63", "Xid 94"), "Xid 94", "RESTART_APP"),  # IGNORE ranks below a contained error
    (("Xid 13", "Xid 31"), "Xid 13", "RESTART_APP"),  # a tie: the code seen first
    (("fallen off the bus",), "fallen off the bus", None),  # nothing keyed: the first code
    ((), None, None),
])
def test_the_most_drastic_action_decides(codes: tuple[str, ...], code: str | None, key: str | None) -> None:
    d = decisive(facts(*codes), ORDER)
    assert (d.code, d.key) == (code, key)


def test_xid_154_ranks_by_the_recovery_it_names() -> None:
    reboot = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    reset = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    # A node reboot outranks the Xid 119's GPU reset: the driver's current instruction decides.
    d = decisive(facts("Xid 119", "Xid 154", messages={"Xid 154": reboot}), ORDER)
    assert (d.code, d.key, d.action) == ("Xid 154", "RESTART_BM", "XID_154: Node Reboot Required")
    assert d.recovery is not None and (d.recovery.name, d.recovery.text) == ("NODE_REBOOT", "Node Reboot Required")
    # The same recovery as the Xid 119's: the fault it reports on leads, the recovery is kept.
    d = decisive(facts("Xid 119", "Xid 154", messages={"Xid 154": reset}), ORDER)
    assert (d.code, d.key) == ("Xid 119", "RESET_GPU") and d.recovery is not None
    assert d.recovery.text == "GPU Reset Required"
    # A line that names no recovery (truncated): NVIDIA's XID_154, which ranks high.
    d = decisive(facts("Xid 119", "Xid 154", messages={"Xid 154": "GPU recovery action changed from"}), ORDER)
    assert (d.code, d.key, d.recovery) == ("Xid 154", "XID_154", None)


@pytest.mark.parametrize(("message", "name"), [
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "DRAIN_AND_RESET"),
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "NONE"),
    ("GPU recovery action changed from 0x0 (None) to 0x2", "NODE_REBOOT"),
    ("GPU recovery action changed from 0x0 (None) to 0x9 (Something New)", None),  # not an NVML value
    ("Timeout after 6s of waiting for RPC response", None),
])
def test_the_recovery_action_is_read_from_the_driver_line(message: str, name: str | None) -> None:
    rec = recovery_of(message)
    assert (rec.name if rec else None) == name


@pytest.mark.parametrize(("sxid", "key"), [(12028, "nvswitch_non_fatal")] + [
    (code, "nvswitch_fatal" if info.fatal else "nvswitch_non_fatal")
    for code, info in sorted(load_catalog().sxids.items())[:40:7]])
def test_an_sxid_selects_the_branch_its_severity_in_the_catalog_names(sxid: int, key: str) -> None:
    d = decisive([CodeFacts(f"SXid {sxid}")], ORDER)
    assert (d.code, d.key) == (f"SXid {sxid}", key)
    assert d.action == ("fatal SXid" if key == "nvswitch_fatal" else "non-fatal SXid")


def test_an_unknown_sxid_has_no_branch() -> None:
    d = decisive([CodeFacts("SXid 99999")], ORDER)
    assert (d.code, d.key, d.action) == ("SXid 99999", None, None)
