"""The stream pipeline's policy: every window and threshold the correlation, classification,
incident and fleet decisions use, with the reason for each default.

All durations are seconds. The values are plain data so a worker can load them from its settings
and a test can state them inline.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PipelinePolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

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
    update_interval_s: float = Field(
        default=5.0,
        ge=0,
        description="repeats of an open incident are published on the incidents topic at most this often (the "
        "row itself is updated with every batch); openings, reclassifications, resolutions and anything that "
        "requests an action are published at once",
    )
    cordon_after_repeats: int = Field(
        default=3,
        ge=1,
        description="hardware-class faults (or suspected hardware) on one GPU from which a cordon is requested",
    )
    immediate_cordon_families: tuple[str, ...] = Field(
        default=("gpu_lost",),
        description="fault families that request a cordon at the first fault",
    )
    immediate_cordon_xids: tuple[int, ...] = Field(
        default=(48, 79, 95, 119, 120),
        description="Xids that request a cordon at once: double-bit ECC, fallen off the bus, uncontained ECC, "
        "GSP failures (NVIDIA's action for each is a GPU reset or a node reboot)",
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
    fleet_families: tuple[str, ...] = Field(
        default=("gpu_lost", "memory", "nvlink", "nvswitch", "pcie", "gsp", "gpu_hardware", "driver", "thermal"),
        description="families that count towards fleet incidents (application faults follow workloads, not "
        "the fleet, so they are left out)",
    )
