"""What to do now: every catalog action has its steps, and each incident class gets the right ones."""

from __future__ import annotations

import pytest

from models.catalog import load_catalog
from models.runbook import load_runbook, parse_runbook, what_to_do

FACTS = {"node": "gpu-node-07", "gpu": "1654923011263", "pci": "0000:63:00.0", "owner": "the owners of team-x/job",
         "namespace": "team-x"}


def test_every_immediate_action_in_the_catalog_has_steps() -> None:
    actions = {x.immediate_action for x in load_catalog().xids.values() if x.immediate_action}
    rb = load_runbook()
    assert actions <= set(rb.actions), sorted(actions - set(rb.actions))
    assert set(rb.order) >= actions


# One row per action value: a phrase its steps must carry (the guide's procedure, section 十).
EXPECTED = {
    "RESTART_APP": ["Restart the job", "no hardware action"],
    "RESET_GPU": ["kubectl drain gpu-node-07", "nvidia-smi -r -i 0000:63:00.0", "dcgmi diag", "kubectl uncordon"],
    "RESTART_BM": ["kubectl drain gpu-node-07", "Reboot the node", "dcgmi diag", "kubectl uncordon"],
    "RESTART_VM": ["restart the virtual machine", "dcgmi diag"],
    "CONTACT_SUPPORT": ["nvidia-bug-report.sh", "serial number (1654923011263)", "dossier", "RMA"],
    "IGNORE": ["No action is needed"],
    "CHECK_MECHANICALS": ["power cables", "cooling"],
    "CHECK_UVM": ["nvidia-uvm"],
    "UPDATE_SWFW": ["Update the driver and GPU firmware"],
    "WORKFLOW_XID_45": ["act on the other codes"],
    "WORKFLOW_XID_48": ["ROW_REMAPPER", "replaced"],
    "WORKFLOW_NVLINK_ERR": ["nvidia-smi nvlink", "contact support"],
    "WORKFLOW_NVLINK5_ERR": ["NVLink 5", "Fabric Manager"],
    "XID_154": ["recovery", "nvidia-smi -r -i 0000:63:00.0", "dcgmi diag"],
}


@pytest.mark.parametrize("action", sorted(EXPECTED))
def test_each_action_says_what_to_do(action: str) -> None:
    out = what_to_do(component="gpu", category="hardware", family="other", actions=[action], facts=FACTS)
    text = " ".join(out.steps)
    for phrase in EXPECTED[action]:
        assert phrase in text, (action, phrase)
    assert "{" not in text and "unknown" not in text.lower()
    assert action in out.entries


def test_every_runbook_action_is_covered_here() -> None:
    assert set(load_runbook().actions) == set(EXPECTED)


def test_an_application_fault_names_the_owner_and_no_hardware_action() -> None:
    out = what_to_do(component="workload", category="application", family="application",
                     actions=["RESTART_APP", "RESET_GPU"], facts=FACTS)
    assert out.entries == ("application",)
    assert "the owners of team-x/job" in out.steps[0] and "No hardware action" in out.steps[0]
    assert not any("nvidia-smi -r" in s for s in out.steps)


def test_a_gpu_lost_from_the_bus_says_what_to_check_first_then_support() -> None:
    out = what_to_do(component="gpu", category="hardware", family="gpu_lost", actions=["RESTART_BM"],
                     investigatory=["CONTACT_SUPPORT"], facts=FACTS)
    assert out.entries == ("gpu_lost", "CONTACT_SUPPORT")
    assert out.steps[0].startswith("Check first") and "lspci -s 0000:63:00.0" in out.steps[0]
    assert any("RMA" in s for s in out.steps)


def test_the_most_drastic_action_leads_and_informational_codes_do_not() -> None:
    out = what_to_do(component="gpu", category="hardware", family="memory",
                     actions=["RESTART_APP", "WORKFLOW_XID_48", "IGNORE"], facts=FACTS)
    assert out.entries == ("WORKFLOW_XID_48",)


def test_a_driver_asking_for_a_bug_report_puts_that_first() -> None:
    out = what_to_do(component="gpu", category="hardware", family="gsp", actions=["RESET_GPU", "XID_154"],
                     messages=["A GPU crash dump has been created. If possible, please run nvidia-bug-report.sh"],
                     facts=FACTS)
    assert out.entries == ("bug_report", "XID_154")
    assert "nvidia-bug-report.sh" in out.steps[0] and "before the GPU is reset" in out.steps[0]


@pytest.mark.parametrize(("component", "category", "family", "entry"), [
    ("nvswitch", "interconnect", "nvswitch", "nvswitch"),
    ("fleet", "fleet", "nvlink", "fleet"),
    ("node", "driver", "driver", "no_catalog_action"),
])
def test_classes_without_a_catalog_action(component: str, category: str, family: str, entry: str) -> None:
    out = what_to_do(component=component, category=category, family=family, actions=[], facts=FACTS)
    assert out.entries == (entry,) and out.steps


def test_a_broken_runbook_is_refused() -> None:
    with pytest.raises(ValueError, match="without steps"):
        parse_runbook({"order": [], "classes": {"application": []}, "actions": {}})
    with pytest.raises(ValueError, match="do not exist"):
        parse_runbook({"order": ["NOPE"], "classes": {}, "actions": {}})
    with pytest.raises(ValueError, match="needs the sections"):
        parse_runbook({"order": []})


def test_a_node_whose_gpus_vanished_follows_the_guides_section_16() -> None:
    out = what_to_do(component="node", category="driver", family="gpu_lost", actions=["UPDATE_SWFW"],
                     codes=["driver_error", "driver_load", "gpu_allocatable"], facts={"node": "gpu-a-017"})
    assert out.entries[0] == "gpus_gone"
    assert any("`dkms status`" in s for s in out.steps) and any("mokutil" in s for s in out.steps)
    assert all("gpu-a-017" in s for s in out.steps[:1])
    # a GPU's own missing count is that GPU's loss, not the node's driver
    assert what_to_do(component="gpu", category="hardware", family="gpu_lost", actions=[],
                      codes=["Xid 79", "gpu_count"]).entries[0] == "gpu_lost"
