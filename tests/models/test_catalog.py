"""The bundled Xid/SXid catalog: provenance, coverage and the categories the rest relies on."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from models.catalog import load_catalog, parse_xid_row
from models.families import family_of
from models.kernlog.record import FaultRecord
from models.vocabulary import CATALOG_CATEGORIES, Family


def test_catalog_has_provenance_and_a_version() -> None:
    text = resources.files("models.catalog").joinpath("xid.tsv").read_text(encoding="utf-8")
    assert text.startswith("# catalog_version: ")
    assert "docs.nvidia.com/deploy/xid-errors" in text.splitlines()[1]
    assert load_catalog().version == "2026.11-2"


def test_every_xid_from_1_to_172_with_a_known_category() -> None:
    cat = load_catalog()
    assert sorted(cat.xids) == list(range(1, 173))
    assert {x.category for x in cat.xids.values()} <= set(CATALOG_CATEGORIES)


def test_nvidia_actions_and_categories_for_well_known_codes() -> None:
    cat = load_catalog()
    expect = {13: ("RESTART_APP", "application"), 31: ("RESTART_APP", "application"),
              43: ("IGNORE", "application"), 48: ("WORKFLOW_XID_48", "hardware"), 79: ("RESTART_BM", "hardware"),
              74: ("WORKFLOW_NVLINK_ERR", "interconnect"), 95: ("RESET_GPU", "hardware"),
              119: ("RESET_GPU", "hardware")}
    for code, (action, category) in expect.items():
        info = cat.xid(code)
        assert info is not None and (info.immediate_action, info.category) == (action, category), code


def test_codes_without_published_action_have_none() -> None:
    info = load_catalog().xid(167)
    assert info is not None and info.immediate_action is None


def test_sxid_fatality() -> None:
    cat = load_catalog()
    s1, s2 = cat.sxid(12028), cat.sxid(20034)
    assert s1 is not None and not s1.fatal
    assert s2 is not None and s2.fatal
    assert len(cat.sxids) == 93


def test_every_code_in_use_has_a_category_and_a_reason() -> None:
    for info in load_catalog().xids.values():
        assert info.category_reason, info.code
        if info.description != "Unused":
            assert info.category != "unknown", (info.code, info.description)


def test_no_code_in_use_falls_into_the_unmapped_family() -> None:
    for info in load_catalog().xids.values():
        rec = FaultRecord(line=1, kind="xid", raw="", message="", xid=info.code, category=info.category)
        family = family_of(rec)
        assert isinstance(family, Family)
        assert family != "other" or info.description == "Unused", info.code


def test_nvlink5_codes_take_the_nvlink5_workflow_and_154_its_own() -> None:
    cat = load_catalog()
    for code in range(144, 151):
        info = cat.xid(code)
        assert info is not None and (info.immediate_action, info.category) == ("WORKFLOW_NVLINK5_ERR", "interconnect")
    info = cat.xid(154)
    assert info is not None and (info.immediate_action, info.category) == ("XID_154", "driver")


def test_both_files_record_what_the_last_check_against_nvidia_found() -> None:
    for name in ("xid.tsv", "sxid.tsv"):
        lines = resources.files("models.catalog").joinpath(name).read_text(encoding="utf-8").splitlines()
        checked = [line for line in lines[:4] if line.startswith("# checked: ")]
        assert len(checked) == 1 and len(checked[0]) > 40, name
    assert max(load_catalog().xids) == 172


def test_every_sxid_severity_follows_its_fabric_manager_class() -> None:
    cat = load_catalog()
    for info in cat.sxids.values():
        klass = info.klass.lower()
        # The guide's fatal table (D.5) is fatal; its non-fatal table (D.4) and "other notable" (D.7) are not.
        assert info.fatal == ("fatal" in klass and not klass.startswith(("non-fatal", "other notable"))), info
    assert sum(s.fatal for s in cat.sxids.values()) > 0 and sum(not s.fatal for s in cat.sxids.values()) > 0


def test_xid_154_names_the_recovery_action_nvml_defines() -> None:
    from models.catalog import RECOVERY_ACTIONS
    from models.kernlog import ParseOptions, parse_lines

    assert sorted(RECOVERY_ACTIONS) == list(range(8))
    lines = [f"NVRM: Xid (PCI:0000:4e:00): 154, GPU recovery action changed from 0x0 (None) to 0x{code:x} (x)"
             for code in (1, 2, 4, 7, 9)]
    got = [r.details["recovery_action"] for r in parse_lines(lines, ParseOptions(year=2025))]
    assert got == ["GPU_RESET", "NODE_REBOOT", "DRAIN_AND_RESET", "SYSTEM_REBOOT", "unknown"]


ROW = {"code": "79", "mnemonic": "M", "description": "d", "immediate_action": "RESTART_BM",
       "investigatory_action": "CONTACT_SUPPORT", "category": "hardware", "category_reason": "r"}


@pytest.mark.parametrize(("column", "value", "message"), [
    ("immediate_action", "REBOOT_TWICE", "Xid 79: unknown immediate action 'REBOOT_TWICE'"),
    ("investigatory_action", "ASK_AROUND", "Xid 79: unknown investigatory action 'ASK_AROUND'"),
    ("category", "cosmic_rays", "Xid 79: unknown category 'cosmic_rays'"),
    ("category", "suspected_hardware", "Xid 79: category 'suspected_hardware' is not one the catalog assigns"),
    ("category", "", "Xid 79: category '' is not one the catalog assigns"),
])
def test_a_row_naming_what_the_vocabulary_does_not_is_refused(column: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_xid_row({**ROW, column: value})


def test_a_row_without_actions_has_none() -> None:
    info = parse_xid_row({**ROW, "immediate_action": "", "investigatory_action": ""})
    assert (info.immediate_action, info.investigatory_action, info.category) == (None, None, "hardware")
