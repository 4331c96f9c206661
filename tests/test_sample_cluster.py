"""The bundled sample cluster, incident by incident: one incident per fault of one component, every
sensor's report of a fault counted once, one ticket per physical fault and none for the job that
crashed on its own (its owner's channel gets the message).

The five recorded faults: a job that crashes on two GPUs of gpu-node-01; a GPU of gpu-node-02 that
fails three different jobs and then reports ECC errors (a contained error, the double-bit error with
its row remapping and an uncontained error, and the driver's Xid 45 for the job it killed); a GPU of
gpu-node-03 that falls off the bus (AER, Xid 79, "fallen off the bus" twice, the driver's GPU-lost
lines); an NVLink storm on gpu-node-04 with an NVSwitch error; a GSP timeout on gpu-node-05 with its
crash dump and Xid 154.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from models.cordon_policy import CordonPolicy
from models.scan import scan
from xidpipe.commands.scan import collect
from xidpipe.replay.layout import read_state
from xidpipe.replay.run import ReplayResult, run_replay

SAMPLES = Path(str(resources.files("xidpipe") / "samples" / "cluster"))


@pytest.fixture(scope="module")
def replayed() -> ReplayResult:
    return run_replay(SAMPLES, policy=CordonPolicy())


def one(incidents: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [i for i in incidents if all(i.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(i["node"], i["component"], i["component_id"]) for i in incidents])
    return found[0]


def test_the_expected_incidents_one_by_one(replayed: ReplayResult) -> None:
    incidents = replayed.incidents
    assert len(incidents) == 6

    job = one(incidents, component="workload")
    assert (job["node"], job["component_id"]) == ("gpu-node-01", "team-vision/resnet-train/trainer")
    assert job["classification"] == "application" and job["rule"] == "application:follows-workload"
    assert set(job["codes"]) == {"Xid 13", "Xid 43", "Xid 31"} and job["count"] == 3
    assert job["pods"] == ["team-vision/resnet-train-0/trainer", "team-vision/resnet-train-1/trainer"]

    failing = one(incidents, node="gpu-node-02")
    assert (failing["component"], failing["gpu_uuid"]) == ("gpu", "GPU-a40e77c1-6d2f-4b8a-8c11-52c9f0e4b007")
    assert failing["classification"] == "hardware" and failing["family"] == "memory"
    assert failing["codes"] == ["Xid 13", "Xid 94", "Xid 48", "Xid 63", "Xid 95", "Xid 45"]
    # Three jobs that crashed only there (3 faults) and one ECC event (Xid 94, 48, 63, 95 within seconds), whose
    # Xid 45 for the job it killed is a sympathetic report: that job is affected, no workload incident of its own.
    assert failing["count"] == 4
    assert len(failing["pods"]) == 3 and failing["affected"] == ["team-vision/trainer-9/trainer"]
    # NVIDIA's action is the decisive code's (Xid 48), not the first code's (Xid 13: RESTART_APP), and the reason
    # names the decisive evidence.
    assert failing["immediate_action"] == "WORKFLOW_XID_48"
    assert failing["reason"].startswith("the GPU failed 3 different jobs in 50 min (Xid 13), then Xid 48 (Double Bit "
                                        "ECC Error; NVIDIA: WORKFLOW_XID_48 → DRAIN_AND_RESET")
    assert "GPU memory error (Xid 94, Xid 48, Xid 63, Xid 95)" in failing["reason"]
    (decided,) = [v for v in replayed.cluster.verdicts if v.node == "gpu-node-02"]
    assert (decided.outcome, decided.rule) == ("cordon", "double-bit-error")
    assert "Xid 48 (memory; NVIDIA: WORKFLOW_XID_48)" in decided.reason

    lost = one(incidents, node="gpu-node-03")
    assert (lost["component"], lost["gpu_uuid"]) == ("gpu", "GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63")
    assert lost["family"] == "gpu_lost" and lost["count"] == 1, lost
    assert {"AER", "Xid 79", "fallen off the bus"} <= set(lost["codes"])

    link = one(incidents, node="gpu-node-04", component="gpu")
    assert link["gpu_uuid"] == "GPU-e0d4a1b2-3c4d-4e5f-8a9b-0c1d2e3f409a" and link["family"] == "nvlink"
    assert link["count"] == 800 and link["codes"] == ["Xid 74"]
    assert link["first_seen"].startswith("2026-11-25"), "the storm keeps the kernel's own day"

    switch = one(incidents, node="gpu-node-04", component="nvswitch")
    assert (switch["component_id"], switch["pci"], switch["gpu_uuid"]) == ("0000:86:00.0", "0000:86:00.0", None)
    assert switch["codes"] == ["SXid 12028"] and "NVSwitch 0000:86:00.0" in switch["reason"]

    gsp = one(incidents, node="gpu-node-05")
    assert (gsp["component"], gsp["gpu_uuid"]) == ("gpu", "GPU-77aa01bc-2d3e-4f50-9162-738495a6b04e")
    assert gsp["family"] == "gsp" and gsp["count"] == 1
    assert {"Xid 119", "Xid 154"} <= set(gsp["codes"]) and len(gsp["codes"]) == 3  # and the crash dump
    # Xid 154 joins the GSP fault it reports on; its decoded recovery is NVIDIA's current instruction for the GPU.
    assert (gsp["recovery_action"], gsp["immediate_action"]) == ("GPU_RESET", "RESET_GPU")


def test_one_ticket_per_physical_fault_and_the_job_s_owner_gets_the_message(replayed: ReplayResult) -> None:
    by_id = {i["id"]: i for i in replayed.incidents}
    ticketed = [by_id[t["incident_id"]] for t in replayed.sinks.tickets]
    assert len(ticketed) == len({t["id"] for t in ticketed}) == 5
    assert all(i["component"] != "workload" for i in ticketed)
    (switch_ticket,) = [t for t in replayed.sinks.tickets if by_id[t["incident_id"]]["component"] == "nvswitch"]
    assert "NVSwitch 0000:86:00.0" in switch_ticket["summary"] and "GPU 0000:86" not in switch_ticket["summary"]
    job = next(i for i in replayed.incidents if i["component"] == "workload")
    (message,) = [m for m in replayed.sinks.messages if m["incident_id"] == job["id"]]
    assert message["channel"] != "#gpu-infra"  # the job's team (or the default channel), not the hardware channel
    hardware = {m["incident_id"] for m in replayed.sinks.messages if m["channel"] == "#gpu-infra"}
    assert hardware == {t["id"] for t in ticketed}


@pytest.mark.parametrize("log", sorted(SAMPLES.glob("*.log")), ids=lambda p: p.stem)
def test_scan_finds_the_incidents_replay_finds(replayed: ReplayResult, log: Path) -> None:
    """`xidpipe scan LOG --state state.jsonl` and the pipeline (replay) run one grouping engine: the
    same incidents, component by component, with the same codes, occurrence counts, families,
    categories, NVIDIA actions, affected jobs and recovery actions."""
    scanned = scan(collect([str(log)], None, None), state=read_state(SAMPLES / "state.jsonl"))
    got = sorted((i.component, i.state.component_id, tuple(i.codes()), i.count, i.family, i.category,
                  d["immediate_action"], tuple(d["affected"]), d["recovery_action"])
                 for i in scanned for d in [i.to_dict()])
    want = sorted((i["component"], i["component_id"], tuple(i["codes"]), i["count"], i["family"], i["classification"],
                   i["immediate_action"], tuple(i["affected"]), i["recovery_action"])
                  for i in replayed.incidents if i["node"] == log.stem)
    assert want, f"replay found no incident on {log.stem}"
    assert got == want
