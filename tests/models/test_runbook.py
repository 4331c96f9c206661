"""What to do now: every catalog action and incident class has its steps, in the operations guide's
order (evidence first, nothing reset before it), the isolate step says what the cordon decision did,
and commands name the GPU the way each tool takes it."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest
import yaml

from models.account import Decision
from models.catalog import load_catalog
from models.decisive import CodeFacts, Decisive, Recovery, decisive
from models.runbook import CLASS_KEYS, PHASES, load_runbook, parse_runbook, what_to_do
from models.vocabulary import ImmediateAction

FACTS = {"node": "gpu-node-07", "gpu": "GPU 3 (serial 1654923011263)", "pci": "0000:63:00.0",
         "smi_id": "GPU-c3b9d004", "dcgm_id": "3", "serial": "1654923011263", "owner": "the owners of team-x/job",
         "namespace": "team-x", "evidence": "kernel-log, lspci, nvidia-smi-q", "decision_reason": "rule r: why",
         "recovery": "GPU Reset Required"}
RB = load_runbook()
# What resets, reboots or restarts something: never before the vendor's phase.
ACTS = re.compile(r"nvidia-smi -r\b|^(?:Reset|Reboot|Restart|Power-cycle)\b|power-cycle it|systemctl restart|"
                  r"reload it|\breboot (?:gpu-node|the node)", re.I)


def keyed(key: str | None, code: str = "Xid 1", recovery: Recovery | None = None) -> Decisive:
    return Decisive(code, key, key, recovery, "test")


def run(entry: str, decision: Decision = Decision.CORDONED, **kw: object) -> tuple[tuple[str, str], ...]:
    """The phased steps of a runbook entry, as an incident of its class or decisive key gets them."""
    component, category, family = "gpu", "hardware", "other"
    if entry == "application":
        component, category, family = "workload", "application", "application"
    elif entry == "fleet":
        component, category = "fleet", "fleet"
    elif entry == "gpu_lost":
        family = "gpu_lost"
    args: dict[str, object] = {"component": component, "category": category, "family": family,
                               "decisive": keyed(entry if entry not in ("application", "fleet", "gpu_lost") else None),
                               "decision": decision, "evidence": True, "facts": FACTS}
    args.update(kw)
    out = what_to_do(**args)  # type: ignore[arg-type]
    assert out.entries[0] == entry
    return out.phased


ENTRIES = sorted(RB.entries)


def test_every_immediate_action_in_the_catalog_and_every_class_has_an_entry_and_a_rank() -> None:
    actions = {x.immediate_action for x in load_catalog().xids.values() if x.immediate_action}
    assert actions <= set(RB.entries) and set(RB.actions) == set(ImmediateAction)
    assert set(CLASS_KEYS) <= set(RB.entries)
    assert set(RB.order) == set(RB.entries) - {"application", "fleet"}


@pytest.mark.parametrize(("entry", "decision"), list(itertools.product(ENTRIES, Decision)))
def test_steps_follow_the_guide_and_nothing_is_reset_before_the_evidence(entry: str, decision: Decision) -> None:
    phased = run(entry, decision)
    phases = [p for p, _ in phased]
    assert phases == sorted(phases, key=PHASES.index), phases  # saved, collect, isolate, vendor, validate, rma
    assert phases[0] == "saved" and "xidpipe kept" in phased[0][1]  # the evidence held (`run` gives some)
    for phase, text in phased:
        if PHASES.index(phase) < PHASES.index("vendor"):
            assert not ACTS.search(text), (phase, text)
        assert "{" not in text and "unknown" not in text.lower(), text
    if RB.entries[entry].bug_report:
        bug = next(i for i, (_, t) in enumerate(phased) if "nvidia-bug-report.sh" in t)
        assert all(PHASES.index(p) < PHASES.index("vendor") for p, _ in phased[:bug + 1])


@pytest.mark.parametrize(("entry", "decision"), list(itertools.product(ENTRIES, Decision)))
def test_the_isolate_step_says_what_the_decision_did_and_nothing_more(entry: str, decision: Decision) -> None:
    text = " ".join(t for _, t in run(entry, decision))
    said_cordoned = "is cordoned by xidpipe" in text or re.search(r"keep\b[^.]*\bcordoned", text, re.I)
    assert bool(said_cordoned) == (decision is Decision.CORDONED and RB.entries[entry].isolate != "skip"), text
    if RB.entries[entry].isolate == "drain" and decision is not Decision.CORDONED:
        # a quarantined GPU gets no new work (its DeviceTaintRule) while the node stays schedulable
        assert ("kubectl cordon gpu-node-07" in text or "Make sure no new work lands" in text
                or (decision is Decision.QUARANTINED and "no new pod is given it" in text))
    if decision is Decision.DRY_RUN and RB.entries[entry].isolate != "skip":
        assert "dry run" in text


# A phrase each entry's steps must carry (the guide's procedure and NVIDIA's catalog).
EXPECTED = {
    "RESTART_APP": ["Restart the job", "no hardware action"],
    "RESET_GPU": ["kubectl drain gpu-node-07", "nvidia-smi -r -i GPU-c3b9d004", "dcgmi diag -r 3 -i 3",
                  "kubectl uncordon"],
    "RESTART_BM": ["kubectl drain gpu-node-07", "Reboot gpu-node-07", "dcgmi diag -r 3 -i 3", "kubectl uncordon"],
    "RESTART_VM": ["Restart the virtual machine", "dcgmi diag -r 3 -i 3"],
    "CONTACT_SUPPORT": ["nvidia-bug-report.sh", "serial number (1654923011263)", "dossier", "case"],
    "IGNORE": ["No action is needed"],
    "CHECK_MECHANICALS": ["power cables", "cooling"],
    "CHECK_UVM": ["nvidia-uvm"],
    "UPDATE_SWFW": ["Update the driver and GPU firmware"],
    "WORKFLOW_XID_45": ["act on the other codes"],
    "WORKFLOW_XID_48": ["nvidia-smi -q -d ROW_REMAPPER -i GPU-c3b9d004", "replaced", "dcgmi diag -r 3 -i 3"],
    "WORKFLOW_NVLINK_ERR": ["nvidia-smi nvlink --status -i GPU-c3b9d004", "nvidia-smi nvlink -e -i GPU-c3b9d004",
                            "contact support"],
    "WORKFLOW_NVLINK5_ERR": ["NVLink 5", "Fabric Manager"],
    "XID_154": ["recovery", "nvidia-smi -r -i GPU-c3b9d004", "dcgmi diag -r 3 -i 3"],
    "application": ["the owners of team-x/job", "No hardware action"],
    "fleet": ["common cause", "xidpipe breaker status"],
    "gpus_gone": ["`uname -r`", "mokutil --sb-state", "driver built for this kernel", "kubectl uncordon gpu-node-07"],
    "gpu_lost": ["lspci -s 0000:63:00.0", "nvidia-smi -i GPU-c3b9d004", "ipmitool sel list", "Reboot gpu-node-07"],
    "nvswitch_fatal": ["fabricmanager.log", "restart Fabric Manager", "D.5"],
    "nvswitch_non_fatal": ["fabricmanager.log", "needs no reset", "D.4"],
    "no_catalog_action": ["no action for", "contact support"],
}


@pytest.mark.parametrize("entry", sorted(EXPECTED))
def test_each_entry_says_what_to_do(entry: str) -> None:
    text = " ".join(t for _, t in run(entry))
    for phrase in EXPECTED[entry]:
        assert phrase in text, (entry, phrase)


def test_every_runbook_entry_is_covered_here() -> None:
    assert set(RB.entries) == set(EXPECTED)


COMMAND = re.compile(r"`([^`]*)`")


@pytest.mark.parametrize("entry", ENTRIES)
def test_commands_name_the_gpu_the_way_each_tool_takes_it(entry: str) -> None:
    """`nvidia-smi` and its query modes take `-i <index|UUID|PCI>`, `dcgmi` takes `-i <GPU id>`; only the
    node-wide steps (a fabric, a driver update) address every GPU, and none names a GPU by its serial."""
    for _, text in run(entry):
        for cmd in COMMAND.findall(text):
            if cmd.startswith("nvidia-smi -") and cmd not in ("nvidia-smi nvlink --status",):
                assert " -i GPU-c3b9d004" in cmd, cmd
            if cmd.startswith("dcgmi diag") and entry not in ("nvswitch_fatal", "UPDATE_SWFW"):
                assert cmd == "dcgmi diag -r 3 -i 3", cmd
            assert "1654923011263" not in cmd and " on " not in cmd, cmd


def test_the_sxid_gets_only_the_branch_its_severity_selects() -> None:
    non_fatal = " ".join(t for _, t in run("nvswitch_non_fatal", Decision.NOT_NEEDED))
    fatal = " ".join(t for _, t in run("nvswitch_fatal", Decision.CORDONED))
    assert "fatal SXid stops" not in non_fatal and "restart Fabric Manager" not in non_fatal
    assert "non-fatal SXid" not in fatal and "kubectl drain gpu-node-07" in fatal
    assert "gpu-node-07 stays in service" in non_fatal


def test_the_decoded_xid_154_recovery_is_said_before_the_vendor_steps() -> None:
    rec = Recovery("GPU_RESET", "GPU Reset Required")
    phased = run("RESET_GPU", decisive=keyed("RESET_GPU", "Xid 119", rec))
    vendor = [t for p, t in phased if p == "vendor"]
    assert vendor[0] == ("The driver's Xid 154 names the recovery GPU 3 (serial 1654923011263) needs now: "
                         "GPU Reset Required.")
    assert "nvidia-smi -r -i GPU-c3b9d004" in vendor[1]


def test_an_application_fault_names_the_owner_and_no_hardware_action() -> None:
    d = decisive([CodeFacts("Xid 13", "RESTART_APP"), CodeFacts("Xid 119", "RESET_GPU")], RB.order)
    out = what_to_do(component="workload", category="application", family="application", decisive=d,
                     decision=Decision.NOT_OFFERED, facts=FACTS)
    assert out.entries == ("application",)
    assert not any("nvidia-smi -r" in s or "nvidia-bug-report" in s for s in out.steps)
    assert "the owners of team-x/job" in " ".join(out.steps)


def test_a_gpu_lost_from_the_bus_checks_first_then_reboots_then_escalates() -> None:
    d = decisive([CodeFacts("AER"), CodeFacts("Xid 79", "RESTART_BM")], RB.order)
    out = what_to_do(component="gpu", category="hardware", family="gpu_lost", decisive=d, decision=Decision.DRY_RUN,
                     investigatory=["CONTACT_SUPPORT"], evidence=True, facts=FACTS)
    assert out.entries == ("gpu_lost", "CONTACT_SUPPORT")
    steps = out.steps
    check = next(i for i, s in enumerate(steps) if s.startswith("Check before any reboot"))
    reboot = next(i for i, s in enumerate(steps) if s.startswith("Reboot"))
    case = next(i for i, s in enumerate(steps) if "case with NVIDIA" in s)
    assert 0 < check < reboot < case


def test_a_driver_asking_for_a_bug_report_is_said_so_before_anything_else_is_done() -> None:
    d = decisive([CodeFacts("Xid 119", "RESET_GPU")], RB.order)
    out = what_to_do(component="gpu", category="hardware", family="gsp", decisive=d, decision=Decision.CORDONED,
                     messages=["A GPU crash dump has been created. If possible, please run nvidia-bug-report.sh"],
                     evidence=True, facts=FACTS)
    assert out.steps[1].startswith("The driver asked for `nvidia-bug-report.sh`")
    assert sum("nvidia-bug-report.sh" in s for s in out.steps[:3]) == 1


def test_without_a_capture_the_first_step_says_so_where_the_evidence_matters() -> None:
    assert run("RESET_GPU", evidence=False)[0] == ("saved", RB.saved["none"])
    assert run("application", Decision.NOT_OFFERED, evidence=False)[0][0] == "vendor"  # the owners act
    assert run("fleet", Decision.NOT_OFFERED, evidence=False)[0][0] == "collect"


def _raw() -> dict[str, Any]:
    text = resources.files("models.catalog").joinpath("runbook.yaml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _without_entry(d: dict[str, Any]) -> None:
    del d["entries"]["RESET_GPU"]
    d["order"].remove("RESET_GPU")


def _unknown_field(d: dict[str, Any]) -> None:
    d["entries"]["IGNORE"]["reboot"] = ["now"]


def _isolate_gap(d: dict[str, Any]) -> None:
    del d["isolate"]["drain"]["held"]


def _order_unknown(d: dict[str, Any]) -> None:
    d["order"].append("REPLACE_NODE")


def _no_steps(d: dict[str, Any]) -> None:
    d["entries"]["IGNORE"] = {"bug_report": False, "isolate": "stay"}


def _bad_isolate(d: dict[str, Any]) -> None:
    d["entries"]["IGNORE"]["isolate"] = "quarantine"


@pytest.mark.parametrize(("break_it", "message"), [
    (_without_entry, "missing entries: RESET_GPU"), (_unknown_field, "unknown fields: reboot"),
    (_isolate_gap, "isolate.drain lacks the decisions held"), (_order_unknown, "do not exist: REPLACE_NODE"),
    (_no_steps, "IGNORE has no steps"), (_bad_isolate, "isolate must be drain, stay or skip"),
])
def test_a_broken_runbook_is_refused_with_what_is_wrong(break_it: Callable[[dict[str, Any]], None],
                                                         message: str) -> None:
    data = _raw()
    parse_runbook(data)  # the shipped one is whole
    break_it(data)
    with pytest.raises(ValueError, match=message):
        parse_runbook(data)


def test_a_node_xidpipe_cordoned_and_drained_is_not_drained_again() -> None:
    isolate = [t for p, t in run("RESET_GPU", Decision.CORDONED, drained=True) if p == "isolate"]
    assert len(isolate) == 1 and "pods on the GPU were evicted" in isolate[0] and "kubectl drain" not in isolate[0]
    # The drain said only of a cordoned node: a drain recorded without a cordon changes nothing.
    isolate = [t for p, t in run("RESET_GPU", Decision.DRY_RUN, drained=True) if p == "isolate"]
    assert "kubectl cordon gpu-node-07" in isolate[0]


def test_a_node_whose_gpus_vanished_follows_the_guides_section_16() -> None:
    def entry(component: str, codes: list[str], family: str = "gpu_lost") -> Any:
        return what_to_do(component=component, category="driver", family=family, decisive=keyed("UPDATE_SWFW"),
                          decision=Decision.CORDONED, codes=codes, facts={**FACTS, "node": "gpu-a-017"})

    out = entry("node", ["driver_error", "driver_load", "gpu_allocatable"])
    assert out.entries[0] == "gpus_gone"
    assert any("`dkms status`" in s for s in out.steps) and any("mokutil" in s for s in out.steps)
    assert "gpu-a-017" in out.steps[0]  # the first step names the node
    # a GPU's own missing count is that GPU's loss, not the node's driver
    assert entry("gpu", ["Xid 79", "gpu_count"]).entries[0] == "gpu_lost"
    # a node's driver fault whose GPUs did not vanish follows its decisive code
    assert entry("node", ["driver_error"], family="driver").entries[0] == "UPDATE_SWFW"
