"""The single-node scan: grouping, identity attachment and classification of incidents."""

from __future__ import annotations

from datetime import UTC, datetime

from models.identity import Component
from models.kernlog import ParseOptions, parse_lines
from models.scan import scan
from tests.streams.records import T0, inventory, pci, pods, s, serial, uuid

OPTS = ParseOptions(year=2025, now=datetime(2025, 12, 20, tzinfo=UTC))


def run(lines: list[str], host: str = "n1"):  # type: ignore[no-untyped-def]
    return scan((host, r) for r in parse_lines(lines, OPTS))


def test_storm_is_one_incident_with_its_count() -> None:
    line = ("NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on "
            "link 14(0x0)")
    (inc,) = run([f"[{1000 + i}.000000] {line}" for i in range(5000)])
    assert inc.count == 5000 and inc.family == "nvlink" and inc.category == "interconnect"
    d = inc.to_dict()
    assert d["first_seen"] == "uptime 1000.000000s" and d["last_seen"] == "uptime 5999.000000s"


def test_identity_lines_attach_uuid_and_serial_wherever_they_appear() -> None:
    lines = [
        "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, DBE",
        "NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666",
        "NVRM: GPU Board Serial Number: 1650922001234",
    ]
    (inc,) = run(lines)
    assert inc.gpu == "GPU-2b7e9c4a-1111-2222-3333-444455556666"
    assert inc.serial == "1650922001234" and inc.pci == "0000:3b:00.0"


def test_grouping_is_by_component_and_the_family_is_the_most_severe() -> None:
    lines = [
        "n1 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, Graphics Exception",
        "n1 kernel: NVRM: Xid (PCI:0000:3b:00): 43, pid=1, name=a, Ch 00000010",
        "n1 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, DBE",
        "n1 kernel: NVRM: Xid (PCI:0000:5e:00): 13, pid=2, name=b, Graphics Exception",
        "Nov 18 14:02:11 n2 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=3, name=c, Graphics Exception",
    ]
    incs = run(lines, host="n1")
    keys = [(i.host, i.pci, i.family, i.count) for i in incs]
    # One GPU, one incident: its application faults and its ECC error. A line without a time takes the
    # time of the line before it on its node, as the pipeline gives it its read time: Xid 13 and Xid 43
    # of pid 1 are one crash (one occurrence), the ECC error the next.
    assert keys == [
        ("n1", "0000:3b:00.0", "memory", 2),
        ("n1", "0000:5e:00.0", "application", 1),
        ("n2", "0000:3b:00.0", "application", 1),
    ]
    assert incs[0].fingerprint == Component("gpu", "n1", "0000:3b:00.0").fingerprint


def test_application_xid_repeating_on_one_gpu_is_suspected_hardware_with_evidence() -> None:
    lines = [f"NVRM: Xid (PCI:0000:b7:00): 13, pid={100 + i}, name=job{i}, Graphics Exception" for i in range(3)]
    lines.append("NVRM: Xid (PCI:0000:ca:00): 13, pid=200, name=other, Graphics Exception")
    incs = run(lines)
    assert incs[0].category == "suspected_hardware"
    assert "process:job0, process:job1, process:job2" in incs[0].reason  # without pods, a workload is its process
    assert incs[1].category == "application"


def test_node_level_line_joins_the_gpu_incident_of_its_family() -> None:
    lines = [
        "NVRM: Xid (PCI:0000:63:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F)",
    ]
    (inc,) = run(lines)
    assert inc.family == "gpu_lost" and inc.codes() == ["Xid 79", "driver_error"]
    assert inc.count == 1  # one bus loss: the "GPU lost" assertion is another report of the Xid 79


def test_no_faults_no_incidents() -> None:
    assert run(["NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05"]) == []


def test_every_report_of_one_bus_loss_is_one_occurrence_and_a_later_one_counts_again() -> None:
    lines = [
        "[Tue Nov 24 10:00:00 2026] pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:63:00.0",
        "[Tue Nov 24 10:00:00 2026] nvidia 0000:63:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
        "type=Transaction Layer, (Receiver ID)",
        "[Tue Nov 24 10:00:01 2026] NVRM: GPU at PCI:0000:63:00: GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63",
        "[Tue Nov 24 10:00:01 2026] NVRM: Xid (PCI:0000:63:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "[Tue Nov 24 10:00:01 2026] NVRM: GPU 0000:63:00.0: GPU has fallen off the bus.",
        "[Tue Nov 24 10:00:02 2026] NVRM: A GPU crash dump has been created. If possible, please run",
        "[Tue Nov 24 12:00:00 2026] NVRM: Xid (PCI:0000:63:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
    ]
    (inc,) = run(lines, host="gpu-node-03")
    assert inc.component == "gpu" and inc.gpu == "GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63"
    assert inc.family == "gpu_lost" and inc.count == 2 and len(inc.records) >= 4
    assert inc.fingerprint == Component("gpu", "gpu-node-03", "GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63").fingerprint


def test_an_nvswitch_fault_is_the_nvswitch_s() -> None:
    (inc,) = run(["nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error"])
    assert inc.component == "nvswitch" and inc.gpu == "0000:86:00.0" and inc.family == "nvswitch"
    assert inc.to_dict()["component"] == "nvswitch"


# --- with the nodes' recorded state, as the pipeline attributes faults ------------------------------


def stamped(at: datetime, gpu: int, xid: int, pid: int, name: str, text: str = "Graphics Exception") -> str:
    return f"{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}+00:00 n1 kernel: NVRM: Xid (PCI:{pci(gpu)[:-2]}): {xid}, " \
           f"pid={pid}, name={name}, {text}"


def test_with_pod_assignments_a_job_crashing_on_two_gpus_is_one_workload_incident() -> None:
    state = [inventory("n1", T0), pods("n1", T0 + s(1), {0: ("ml", "train-0", "w"), 1: ("ml", "train-1", "w")})]
    lines = [stamped(T0 + s(60), 0, 13, 7, "python"), stamped(T0 + s(60.1), 0, 43, 7, "python"),
             stamped(T0 + s(61), 1, 13, 8, "python")]
    (job,) = scan([("n1", r) for r in parse_lines(lines, OPTS)], state=state)
    assert (job.component, job.state.component_id, job.count, job.category) == ("workload", "ml/train/w", 2,
                                                                                 "application")
    assert job.to_dict()["pods"] == ["ml/train-0/w", "ml/train-1/w"]
    # Without the state the faults have no pod: each GPU's are its own, as in the stream.
    alone = scan([("n1", r) for r in parse_lines(lines, OPTS)])
    assert sorted((i.component, i.gpu, i.count) for i in alone) == [("gpu", pci(0), 1), ("gpu", pci(1), 1)]


def test_with_pod_assignments_a_gpu_failing_three_jobs_takes_their_faults() -> None:
    jobs = [("a", "job-a-0", "w"), ("b", "job-b-0", "w"), ("c", "job-c-0", "w")]
    state = [inventory("n1", T0), *(pods("n1", T0 + s(600 * i), {0: job}) for i, job in enumerate(jobs))]
    lines = [stamped(T0 + s(600 * i + 60), 0, 13, 10 + i, "python") for i in range(3)]
    (gpu,) = scan([("n1", r) for r in parse_lines(lines, OPTS)], state=state)
    assert (gpu.component, gpu.gpu_uuid, gpu.count) == ("gpu", uuid("n1", 0), 3)
    assert gpu.category == "suspected_hardware" and gpu.rule == "application:stays-with-gpu"
    assert gpu.to_dict()["workloads"] == ["a/job-a/w", "b/job-b/w", "c/job-c/w"]


def test_a_fault_after_the_quiet_period_opens_a_recurrence() -> None:
    lines = [stamped(T0, 0, 48, 1, "x", "DBE"), stamped(T0 + s(7 * 3600), 0, 48, 2, "x", "DBE")]
    first, again = scan([("n1", r) for r in parse_lines(lines, OPTS)])
    assert first.fingerprint == again.fingerprint and again.state.previous_incident_id == first.state.incident_id
    assert (first.to_dict()["status"], again.to_dict()["status"]) == ("resolved", "open")


def test_uptimes_take_the_wall_clock_of_the_recorded_boot_time() -> None:
    boot = T0 - s(1000)
    state = [inventory("n1", T0).model_copy(update={"boot_time": boot})]
    line = f"[ 1200.000000] NVRM: Xid (PCI:{pci(2)[:-2]}): 48, pid='<unknown>', name=<unknown>, DBE"
    (inc,) = scan([("n1", r) for r in parse_lines([line], OPTS)], state=state)
    assert inc.to_dict()["first_seen"] == (boot + s(1200)).isoformat()
    assert inc.gpu_uuid == uuid("n1", 2) and inc.serial == serial("n1", 2)
