"""Sympathetic faults follow their cause (`models.sympathetic`, `models.grouping.Grouper`): each rule
from NVIDIA's catalog text, and the double-bit error that kills a job as one hardware incident."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.incidents import IncidentState
from models.kernlog import ParseOptions, parse_lines
from models.node_records import NodeRecord
from models.scan import scan
from models.stream_policy import PipelinePolicy
from models.sympathetic import cause_codes, sympathetic_to
from tests.streams.records import T0, inventory, pci, pods

W = 60.0


def cause(codes: tuple[int, ...], family: str = "memory", pids: tuple[int, ...] = (), status: str = "open",
          component: str = "gpu") -> IncidentState:
    signals = tuple(f"{family}/kernel:Xid {c}" for c in codes)
    return IncidentState(incident_id="hw", fingerprint="f", node="n", gpu="G", family=family, status=status,  # type: ignore[arg-type]
                         count=1, first_seen=T0, last_seen=T0, component=component, occurrence_at=T0,
                         occurrence_signals=signals, occurrence_pids=pids)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(("xid", "pid", "seconds", "hw", "joins"), [
    # Xid 45, investigatory action "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)"; Xid 94/95: "Xid 45
    # will be seen in relation to this error".
    (45, 7, 2, cause((48, 63, 95), pids=(7,)), True),
    (45, 9, 2, cause((48, 63, 95), pids=(7,)), True),  # 95: "these errors affect multiple applications"
    (45, 7, 2, cause((74,), family="nvlink"), True),  # after any hardware fault of its GPU
    (45, 7, 61, cause((48,)), False),  # past the window: a fault of its own (a job stopped later)
    (45, 7, -1, cause((48,)), True),  # lines of one moment in either order (the clock skew)
    (45, 7, -30, cause((48,)), False),  # long before: not caused by it
    # Xid 94: "contained to one application ... All other applications running at the time are unaffected".
    (45, 7, 2, cause((94,), pids=(7,)), True),
    (45, 9, 2, cause((94,), pids=(7,)), False),
    (43, 7, 2, cause((94,), pids=(7,)), True),
    (13, 9, 2, cause((94,), pids=(7,)), False),
    (13, None, 2, cause((94,), pids=(7,)), False),
    # Xid 48 "is also reported back to the user application": its Xid 13/43 follow it, whatever process.
    (13, 9, 2, cause((48, 63)), True),
    (43, 9, 2, cause((79,), family="gpu_lost"), True),
    (31, 9, 5, cause((119,), family="gsp"), True),
    (13, 9, 2, cause((74,), family="nvlink"), False),  # an NVLink error kills no process by itself
    (13, 9, 2, cause((48,), status="resolved"), False),
    (13, 9, 2, cause((13,), family="application"), False),  # an application fault is no cause
    (None, 9, 2, cause((48,)), False),
])
def test_which_reports_follow_their_cause(xid: int | None, pid: int | None, seconds: float, hw: IncidentState,
                                          joins: bool) -> None:
    why = sympathetic_to(xid, pid, at(seconds), hw, window_s=W, skew_s=2.0)
    assert (why is not None) is joins, why
    if why is not None:
        assert f"Xid {xid}" in why and "after the" in why


def test_cause_codes_read_the_occurrence_s_signals() -> None:
    assert cause_codes(("memory/kernel:Xid 94", "memory/nvml:Xid 48", "gpu_lost/kernel:AER")) == {94, 48}


OPTS = ParseOptions(year=2026, now=datetime(2026, 12, 1, tzinfo=UTC))
BUS = pci(0)[:-2]


def line(second: float, code: int, text: str, pid: int | None = None, name: str = "trainer") -> str:
    who = f"pid={pid}, name={name}" if pid is not None else "pid='<unknown>', name=<unknown>"
    return f"[{1000 + second:.6f}] NVRM: Xid (PCI:{BUS}): {code}, {who}, {text}"


DBE = [
    line(0, 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer."),
    line(1, 63, "Row Remapper: New row (0x00bf12a0) was marked for remapping, reset gpu to activate."),
    line(1.2, 95, "Uncontained: FBHUB. RST: Yes, D-RST: No", pid=4242),
    line(2, 45, "Ch 00000010", pid=4242),
    line(2.5, 154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"),
]


def scanned(lines: list[str], state: list[NodeRecord]):  # type: ignore[no-untyped-def]
    return scan((("n1", r) for r in parse_lines(lines, OPTS)), state=state)


def booted() -> list[NodeRecord]:
    """A node booted 1000 s before T0 (its lines' uptimes are times), its GPU 0 held by trainer-9."""
    boot = T0 - timedelta(seconds=1000)
    return [inventory("n1", boot).model_copy(update={"boot_time": boot}),
            pods("n1", boot, {0: ("team-vision", "trainer-9", "trainer")})]


def test_a_double_bit_error_that_kills_a_job_is_one_hardware_incident() -> None:
    """Issue #23: Xid 48 then 63 and 95, with the driver's Xid 45 for the killed process and its Xid 154:
    one hardware incident, one occurrence, the job recorded as affected; no workload incident."""
    (inc,) = scanned(DBE, booted())
    d = inc.to_dict()
    assert (d["component"], d["family"], d["category"], d["count"]) == ("gpu", "memory", "hardware", 1)
    assert d["codes"] == ["Xid 48", "Xid 63", "Xid 95", "Xid 45", "Xid 154"]
    # The job the Xid 45 reports is affected; the workload listed is the one the Xid 95 line itself names.
    assert d["affected"] == ["team-vision/trainer-9/trainer"] and d["workloads"] == ["team-vision/trainer/trainer"]
    assert d["recovery_action"] == "GPU_RESET"  # NVIDIA's current instruction for the GPU, from Xid 154
    assert (d["immediate_action"], d["decisive_code"]) == ("WORKFLOW_XID_48", "Xid 48")
    assert [e.affected for e in inc.events] == [False, False, False, True, False]


def test_without_the_hardware_fault_the_job_s_xid_45_is_its_own() -> None:
    (inc,) = scanned([line(2, 45, "Ch 00000010", pid=4242)], booted())
    assert inc.component == "workload" and inc.to_dict()["affected"] == []


def test_a_later_fault_of_the_job_is_its_own_again() -> None:
    later = [*DBE, line(400, 13, "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 1): Out Of Range Address",
                        pid=5151, name="python3")]
    incs = scanned(later, [])
    assert [(i.component, i.family, i.count) for i in incs] == [("gpu", "memory", 2)]  # no pods: the GPU's
    assert [e.affected for e in incs[0].events][-1] is False


def test_xid_154_joins_the_fault_it_reports_on_whatever_its_family() -> None:
    """Xid 154 (catalog: "Informational only regarding another Xid") after an NVLink error is the same
    occurrence, not a second fault; its decoded recovery action is kept on the incident."""
    lines = [line(0, 74, "NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
             line(3, 154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")]
    (inc,) = scanned(lines, [])
    assert (inc.family, inc.count, inc.codes()) == ("nvlink", 1, ["Xid 74", "Xid 154"])
    assert inc.state.recovery_action == "NODE_REBOOT"


def test_the_window_is_a_policy_value() -> None:
    assert PipelinePolicy().sympathetic_window_s == 60.0
    assert "follow other Xid" in (PipelinePolicy.model_fields["sympathetic_window_s"].description or "")
