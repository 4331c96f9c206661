"""NVIDIA's workflows as decisions (`models.workflows`): one table per WORKFLOW_* bucket of the Xid
catalog, each row citing the rule of NVIDIA's "Fault Resolution Buckets" sheet it follows
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)."""

from __future__ import annotations

from typing import Any

import pytest

from models.catalog import load_catalog
from models.workflows import WorkflowFacts, XidReport, decide, workflow_of, workflows
from models.workflows.nvlink import findings, registers
from models.workflows.nvlink5 import decode


def facts(*reports: tuple[int, str] | tuple[int, str, dict[str, Any]], other_gpus: int = 0) -> WorkflowFacts:
    return WorkflowFacts([XidReport(r[0], r[1], r[2] if len(r) > 2 else {}) for r in reports],  # type: ignore[misc]
                         other_gpus)


def test_every_workflow_bucket_of_the_catalog_is_a_decision() -> None:
    cat = load_catalog()
    named = {str(a) for x in cat.xids.values() for a in (x.immediate_action, x.investigatory_action)
             if a is not None and str(a).startswith("WORKFLOW_")}
    assert named == set(workflows()), named ^ set(workflows())
    assert (workflow_of(13), workflow_of(45), workflow_of(48), workflow_of(74), workflow_of(147)) == (
        "WORKFLOW_XID_13", "WORKFLOW_XID_45", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR")
    assert workflow_of(79) is None and decide("RESET_GPU", facts((79, ""))) is None


def gpc(g: int, t: int, s: int) -> dict[str, int]:
    return {"gpc": g, "tpc": t, "sm": s}


@pytest.mark.parametrize(("reports", "action", "rule"), [
    ([(13, "", gpc(2, 0, 1))], "CHECK_APP/CUDA", "Solo, no burst: CHECK_APP/CUDA"),
    ([(13, "", gpc(2, 0, 1)), (13, "", gpc(2, 0, 3))], "RUN_DCGMEUD",
     "Repeat TPC and GPC (2 faults, GPC 2 TPC 0), diff SMs"),
    ([(13, "", gpc(2, 0, 1)), (13, "", gpc(2, 0, 1))], "RUN_DCGMEUD", "single SM: RUN_DCGMEUD (possible HW issue)"),
    # The demo's failing GPU: three jobs, three TPCs of GPC 2.
    ([(13, "", gpc(2, 0, 1)), (13, "", gpc(2, 1, 1)), (13, "", gpc(2, 2, 1))], "CHECK_APP/CUDA",
     "Not Repeat TPC and GPC (3 faults at 3 places)"),
    ([(13, ""), (13, "")], "CHECK_APP/CUDA", "without a TPC and GPC to compare"),
])
def test_workflow_xid_13(reports: list[Any], action: str, rule: str) -> None:
    """'Repeat TPC and GPC, diff SMs: RUN_DCGMEUD (possible HW issue); if pass RUN_FIELDDIAGS; Repeat TPC and
    GPC, single SM: RUN_DCGMEUD ...; Solo, no burst: CHECK_APP/CUDA; Not Repeat TPC and GPC: CHECK_APP/CUDA'"""
    decided = decide("WORKFLOW_XID_13", facts(*reports))
    assert decided is not None and decided.action == action and rule in decided.reason, decided
    assert (decided.investigate == "RUN_FIELDDIAGS") is (action == "RUN_DCGMEUD")


@pytest.mark.parametrize(("reports", "other_gpus", "action", "rule"), [
    ([(31, "MMU Fault")], 0, "CHECK_APP/CUDA", "Solo, no burst"),
    ([(31, "MMU Fault"), (31, "MMU Fault")], 0, "RUN_DCGMEUD", "Repeat MMU faults to same GPU (2 faults)"),
    ([(31, "MMU Fault"), (31, "MMU Fault")], 1, "CHECK_APP/CUDA", "Repeat MMU faults to diff GPU"),
])
def test_workflow_xid_31(reports: list[Any], other_gpus: int, action: str, rule: str) -> None:
    """'Repeat MMU faults to same GPU (via PCI-ID): RUN_DCGMEUD (possible HW issue); if pass RUN_FIELDDIAGS;
    Repeat MMU faults to diff GPU (via PCI-ID): CHECK_APP/CUDA; Solo, no burst: CHECK_APP/CUDA'"""
    decided = decide("WORKFLOW_XID_31", facts(*reports, other_gpus=other_gpus))
    assert decided is not None and decided.action == action and rule in decided.reason


def test_workflow_xid_45() -> None:
    """'Solo: RESTART_FM Not Solo: IGNORE (follow guidance in other Xid)'"""
    solo = decide("WORKFLOW_XID_45", facts((45, "Ch 00000010")))
    with_dbe = decide("WORKFLOW_XID_45", facts((48, "DBE"), (45, "Ch 00000010")))
    assert solo is not None and (solo.action, solo.reason) == ("RESTART_FM", "Solo: RESTART_FM")
    assert with_dbe is not None and with_dbe.action == "IGNORE" and "follow guidance in other Xid" in with_dbe.reason
    assert "(Xid 48)" in with_dbe.reason


DBE_FB = "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6."
DBE_SRAM = "An uncorrectable double bit error (DBE) has been detected on GPU in SRAM (L2 cache)."


@pytest.mark.parametrize(("reports", "action", "investigate", "rule"), [
    ([(48, DBE_FB)], "RESET_GPU", "RUN_FIELDDIAG", "Solo: RESET_GPU; investigate Solo: RUN_FIELDDIAG"),
    ([(48, DBE_FB), (63, "Row Remapper")], "DRAIN_AND_RESET", "follow the Xid 63/64 guidance",
     "w/ 63 or 64 (Xid 63): DRAIN_AND_RESET; FB: follow Xid63/64 guidance"),
    ([(48, DBE_FB), (64, "remapping failed")], "DRAIN_AND_RESET", "follow the Xid 63/64 guidance", "(Xid 64)"),
    ([(48, DBE_SRAM), (94, "Contained")], "RESET_GPU", "check the SRAM error threshold flag "
     "(nvidia-smi sram_threshold_exceeded); if set RUN_FIELDDIAG", "SRAM: check SRAM Error Threshold flag"),
    ([(48, "DBE"), (172, "")], "RESET_GPU", "check the SRAM error threshold flag (nvidia-smi "
     "sram_threshold_exceeded); if set RUN_FIELDDIAG", "SRAM"),  # Xid 172: "to differentiate DRAM/SRAM"
    ([(48, "DBE"), (95, "Uncontained")], "RESET_GPU", "RUN_FIELDDIAG", "the line names no unit"),
])
def test_workflow_xid_48(reports: list[Any], action: str, investigate: str, rule: str) -> None:
    """'Data Center Recovery Action Solo: RESET_GPU w/ 63 or 64: DRAIN_AND_RESET Investagatory Action Solo:
    RUN_FIELDDIAG Not Solo: String in error would tell us what unit was impacted. FB: follow Xid63/64
    guidance All other SRAM: check SRAM Error Threshold flag ... If set RUN_FIELDDIAG'"""
    decided = decide("WORKFLOW_XID_48", facts(*reports))
    assert decided is not None and (decided.action, decided.investigate) == (action, investigate)
    assert rule in decided.reason, decided.reason


def xid74(link: int, *regs: int) -> tuple[int, str]:
    return 74, f"NVLink: fatal error detected on link {link}({', '.join(hex(r) for r in regs)})"


@pytest.mark.parametrize(("reports", "action", "cited"), [
    ([xid74(3, 0x1)], "IGNORE", "Can be safely ignored."),  # first register, bit 0
    ([xid74(3, 0x2)], "REPORT_ISSUE", "If seen solo, please report a bug."),  # bit 1, solo
    ([xid74(3, 0x2), (79, "")], "FOLLOW_OTHER_XID", "sympathetic or secondary"),  # bit 1 with another Xid
    ([xid74(3, 0x10)], "CONTINUE", "If seen more than 2 times on the same link"),  # bit 4, once
    ([xid74(3, 0x10)] * 3, "REPORT_ISSUE", "(3 times)"),  # bit 4, three times on link 3
    ([xid74(3, 0x10), xid74(4, 0x10), xid74(5, 0x10)], "CONTINUE", "ECC/Parity"),  # once on each of three links
    ([xid74(3, 0x100)], "CHECK_MECHANICALS", "Check link mechanical connections and re-seat"),  # bit 8
    ([xid74(3, 0x200000)], "CHECK_MECHANICALS", "Marginal channel SI issue"),  # bit 21, alone
    ([xid74(3, 0x8000000)], "CONTINUE", "If seen repeatedly, please report a bug."),  # bit 27 once
    ([xid74(3, 0, 0, 0x2000)], "REPORT_ISSUE", "Not expected to be seen in production."),  # third register bit 13
    # The demo's NVLink storm: third register bit 16, "If seen repeatedly, please run Field Diags and report a bug".
    ([xid74(12, 0, 0, 0x10000)] * 2, "RUN_FIELDDIAG", "link 12, register 3 bit 16 (2 times)"),
    ([xid74(3, 0, 0, 0, 0x40000)], "REPORT_ISSUE", "a reset of the fabric is required"),  # fourth bit 18, solo
    ([xid74(3, 0, 0, 0, 0x40000), (79, "")], "RESET_FABRIC", "a reset of the fabric is required"),
    ([xid74(3, 0, 0, 0, 0, 0x100000)], "CONTINUE", "threshold of ECC errors being exceeded"),  # fifth bit 20
    ([xid74(3, 0, 0x1)], "REPORT_ISSUE", "If bits other than those specifically outlined"),  # second register
])
def test_workflow_nvlink_err_decodes_the_registers(reports: list[Any], action: str, cited: str) -> None:
    """WORKFLOW_NVLINK_ERR: 'Extract the hex strings from the Xid error message ... Evaluate the populate(d)
    registers. If bits other than those specifically outlined below are seen, please report a bug.'"""
    decided = decide("WORKFLOW_NVLINK_ERR", facts(*reports))
    assert decided is not None and decided.action == action and cited in decided.reason, decided


def test_the_register_words_are_read_from_the_line() -> None:
    assert registers("NVLink: fatal error detected on link 12(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)") == (
        12, [0, 0, 0x10000, 0, 0, 0, 0])
    assert registers("NVLink: fatal error detected on link 14(0x0)") == (14, [0])
    assert registers("NVLink: fatal error detected on link") is None
    assert decide("WORKFLOW_NVLINK_ERR", facts((74, "NVLink"))) is None
    (f,) = findings(facts(xid74(12, 0, 0, 0x10000)))
    assert (f.link, f.register, f.bit, f.kind) == (12, 3, 16, "diags_if_repeated")


@pytest.mark.parametrize(("xid", "line", "row"), [
    # XID 144-150 Decode, rows as NVIDIA publishes them: (immediate, investigatory, severity).
    (144, "SAW_MVB Fatal XC0 i0 Link 00 (0x00000001 0x00000002 0x00000000 0x00000000)",
     ("RESET_GPU", "CONTACT_SUPPORT", "Fatal")),
    (144, "SAW_MVB Nonfatal XC0 i0 Link 00 (0x00000001 0x00000001 0x00000000 0x00000000)",
     ("IGNORE", "CONTACT_SUPPORT", "Non-fatal")),
    (145, "RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004 0x00000001 0x00000000 0x00000000)",
     ("XID_154_EVAL", "CONTACT_SUPPORT", "Non-fatal")),
    (145, "RLW_CTRL Nonfatal XC0 i0 Link 00 (0x00000003 0x80000000 0x00000000 0x00000000)",
     ("IGNORE", "CONTACT_SUPPORT", "Non-fatal")),
    (146, "TLW_CTRL Fatal XC0 i0 Link 00 (0x00000009 0x00000004 0x00000000 0x00000000)",
     ("RESET_GPU", "CONTACT_SUPPORT", "Fatal")),
    # Xid 149 link down, by the reason in intrInfo (gpud's fixtures): 000000 and 010000.
    (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
     ("RESET_GPU", "SYMPATHETIC_REPORT_SOLO", "Link Fatal")),
    (149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
     ("RESET_GPU", "INVESTIGATE_SW_USER_LINK_SI", "Link Fatal")),
    (149, "NETIR_MFDE_EVENT Nonfatal XC0 i0 Link 02 (0x00000246 0x00000003 0x00000000 0x00000000)",
     ("IGNORE", "IGNORE", "Non-fatal")),
])
def test_workflow_nvlink5_err_decodes_the_sub_code_and_error_status(xid: int, line: str,
                                                                    row: tuple[str, str, str]) -> None:
    """WORKFLOW_NVLINK5_ERR: '<intrInfo>, <errorStatus> must be decoded and evaluated using "XID 144-150
    Decode" to derive the final resolution.'"""
    found = decode(xid, line)
    assert found is not None and found[2] == row, found


def test_nvlink5_decisions_follow_xid_154_or_the_line_s_severity() -> None:
    """XID_154_EVAL: 'If an XID 154 is seen along with this error, take that action. If no XID 154 present,
    RESTART_APP'; a row the sheet lacks is decided by the severity the line prints."""
    remap = (145, "RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004 0x00000001 0x00000000 0x00000000)")
    alone = decide("WORKFLOW_NVLINK5_ERR", facts(remap))
    with_154 = decide("WORKFLOW_NVLINK5_ERR", facts(remap, (154, "GPU recovery action changed")))
    assert alone is not None and alone.action == "RESTART_APP"
    assert with_154 is not None and with_154.action == "XID_154"
    unknown = decide("WORKFLOW_NVLINK5_ERR", facts((147, "TREX Fatal XC0 i0 Link 00 (0x00000001 0x00000004)")))
    assert unknown is not None and unknown.action == "RESET_GPU" and "by its severity" in unknown.reason
    assert decide("WORKFLOW_NVLINK5_ERR", facts((149, "NETIR_LINK_EVT"))) is None
