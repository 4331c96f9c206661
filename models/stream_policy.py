"""The stream pipeline's policy: every window and threshold the correlation, classification,
incident and fleet decisions use, with the reason for each default.

All durations are seconds. The values are plain data so a worker can load them from its settings
and a test can state them inline.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from models.vocabulary import Family

# Keys of earlier versions that are gone, with what replaced them (a clear error instead of "extra inputs").
REMOVED_KEYS = {
    key: "cordons are decided by the YAML cordon policy alone (XIDPIPE_ACTIONS_POLICY_FILE; "
         "docs/configuration.md): state the threshold as a rule there"
    for key in ("cordon_after_repeats", "immediate_cordon_families", "immediate_cordon_xids")
}


class PipelinePolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_removed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            gone = sorted(k for k in data if k in REMOVED_KEYS)
            if gone:
                raise ValueError(f"{', '.join(gone)}: removed; {REMOVED_KEYS[gone[0]]}")
        return data

    # --- correlation ----------------------------------------------------------------------------
    clock_skew_s: float = Field(
        default=2.0,
        ge=0,
        description="a state snapshot stamped up to this long after a fault still counts as valid at the fault: "
        "the node agent samples PodResources and processes on a timer, so the snapshot that shows the "
        "faulting pod can carry a slightly later stamp than the kernel line",
    )
    duplicate_window_s: float = Field(
        default=5.0,
        ge=0,
        description="a kernel-log Xid and an NVML Xid event for the same node, GPU and Xid this close in time "
        "are one fault (the driver reports both within milliseconds; 5 s absorbs agent batching)",
    )
    late_state_s: float = Field(
        default=60.0,
        ge=0,
        description="node state that arrives up to this long (arrival time) after a fault still attributes it: "
        "state and kernel lines travel on different topics, and a worker may read them in either order",
    )
    history_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="how far back node state (inventory, pods, processes) is kept for joins",
    )

    # --- classification in context ----------------------------------------------------------------
    repeat_threshold: int = Field(
        default=3,
        ge=1,
        description="application-class faults on one GPU from which a repeat is suspicious (one crash often "
        "logs two lines, e.g. Xid 13 then Xid 43, so 3)",
    )
    min_distinct_workloads: int = Field(
        default=2,
        ge=1,
        description="distinct workloads that must have hit the same GPU before the GPU is suspected",
    )
    classify_window_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        description="faults older than this do not count towards repeats or workload spread (a day covers "
        "the retries of a failing job and the next jobs scheduled onto the same GPU)",
    )

    # --- incidents -------------------------------------------------------------------------------
    quiet_period_s: float = Field(
        default=6 * 3600.0,
        gt=0,
        description="an open incident without a new fault for this long is resolved; a later fault opens a "
        "new incident linked to it (6 h: longer than a job retry loop, shorter than a work shift)",
    )
    occurrence_window_s: float = Field(
        default=120.0,
        ge=0,
        description="reports of one fault arrive together: an AER report, Xid 79 and the GPU-lost lines within "
        "seconds; Xid 119, its crash dump and the Xid 154 recovery action within a minute or two. A companion "
        "report this close to the occurrence counted last joins it without counting (models.identity)",
    )
    sympathetic_window_s: float = Field(
        default=60.0,
        ge=0,
        description="an application-class report this soon after a hardware fault of its GPU is a sympathetic "
        "report of it (models.sympathetic: NVIDIA's 'Xid 45 ... Not Solo: IGNORE (follow other Xid)', and the Xid "
        "13/31/43 of a process the fault killed): the driver tears the killed processes' channels down and they "
        "fail their next call within seconds; a minute allows for a busy kernel log and the agent's batching, "
        "and stays short of the next job's faults. Such a report joins the hardware incident, its workload "
        "recorded as affected",
    )
    update_interval_s: float = Field(
        default=5.0,
        ge=0,
        description="repeats of an open incident are published on the incidents topic at most this often (the "
        "row itself is updated with every batch); openings, reclassifications, resolutions and anything that "
        "requests a ticket or message are published at once (a repeat's cordon candidate goes to the "
        "responder at once either way)",
    )

    # --- fleet view ------------------------------------------------------------------------------
    fleet_window_s: float = Field(
        default=600.0,
        gt=0,
        description="faults of one family on many nodes within this window are one fleet incident (10 min: a "
        "driver rollout or a rack power event hits nodes within minutes)",
    )
    fleet_min_nodes: int = Field(
        default=3,
        ge=2,
        description="distinct nodes with the same fault family in the window that make a fleet incident",
    )
    fleet_families: tuple[Family, ...] = Field(
        default=(Family.GPU_LOST, Family.MEMORY, Family.NVLINK, Family.NVSWITCH, Family.PCIE, Family.GSP,
                 Family.GPU_HARDWARE, Family.DRIVER, Family.THERMAL),
        description="families that count towards fleet incidents (application faults follow workloads, not "
        "the fleet, so they are left out)",
    )
