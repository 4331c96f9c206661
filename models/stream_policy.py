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


class HealthPolicy(BaseModel):
    """The thresholds and windows of the health signals' decisions (`models.signals.health`,
    `models.signals.node_health`, `models.signals.kube_gpus`; docs/signals.md), each default with its source.

    The windows are bounded by the history a reading carries (`models.signals.health.history`: the
    last 60 minutes by the minute, the last 24 hours by the hour).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # --- memory repair ---------------------------------------------------------------------------
    retired_pages_max: int = Field(
        default=63,
        ge=1,
        description="retired pages (single- and double-bit) from which a GPU is due for RMA: DCGM's health "
        "watch fails a GPU at DCGM_LIMIT_MAX_RETIRED_PAGES, 63, matched to NVIDIA's field diagnostic",
    )
    # --- single-bit ECC trend --------------------------------------------------------------------
    sbe_window_s: float = Field(
        default=3600.0,
        ge=60,
        le=3600,
        description="the recent window single-bit ECC errors are counted over (1 h: DCGM's health watches keep "
        "the last hour of samples)",
    )
    sbe_baseline_s: float = Field(
        default=24 * 3600.0,
        ge=3600,
        le=24 * 3600,
        description="the GPU's own baseline: its single-bit rate over this long before the recent window",
    )
    sbe_min_errors: int = Field(
        default=10,
        ge=1,
        description="single-bit errors in the recent window below which no trend is reported, whatever the "
        "baseline (DCGM_LIMIT_MAX_SBE_RATE, 10, which DCGM itself marks provisional)",
    )
    sbe_factor: float = Field(
        default=3.0,
        ge=1,
        description="the recent rate must exceed the baseline rate this many times (no vendor gives one: gpud "
        "keeps the counters as metrics; the operations guide asks to watch single-bit errors as a trend)",
    )
    # --- NVLink ----------------------------------------------------------------------------------
    nvlink_window_s: float = Field(
        default=60.0,
        ge=60,
        le=3600,
        description="the window NVLink error counters are compared over (DCGM's NVLink health watch: the last "
        "minute)",
    )
    nvlink_replay_max: int = Field(
        default=1,
        ge=1,
        description="NVLink replay and recovery errors in the window that are an interconnect fault "
        "(DCGM_LIMIT_MAX_NVLINK_ERROR, 1: DCGM fails the GPU on one)",
    )
    nvlink_crc_per_s: float = Field(
        default=100.0,
        gt=0,
        description="NVLink CRC (flit and data) errors per second that are an interconnect fault "
        "(DCGM_LIMIT_MAX_NVLINK_CRC_ERROR: NVIDIA's driver team told DCGM they matter from 100 a second)",
    )
    # --- PCIe ------------------------------------------------------------------------------------
    pcie_replays_per_min: int = Field(
        default=8,
        ge=1,
        description="PCIe replays per minute above which the link is faulty (DCGM_LIMIT_MAX_PCIREPLAY_RATE: "
        "8 a minute is the most NVIDIA's driver team recommends)",
    )
    pcie_gen_window_s: float = Field(
        default=600.0,
        ge=60,
        le=3600,
        description="a link generation below the maximum is a fault only when it held in every busy minute of "
        "this window (a GPU trains its link down when idle to save power: only a busy link counts)",
    )
    # --- thermal and power -----------------------------------------------------------------------
    thermal_window_s: float = Field(
        default=600.0,
        ge=60,
        le=3600,
        description="the window hardware slowdown is judged over (gpud's hw-slowdown check: 10 minutes)",
    )
    thermal_min_share: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description="share of the window's minutes with a hardware slowdown reason (HW slowdown, HW or SW "
        "thermal, HW power brake) that is sustained slowdown (gpud: 0.6)",
    )
    thermal_margin_c: int = Field(
        default=5,
        description="a minute is hot when the GPU came within this many degrees of its slowdown temperature "
        "(nvmlDeviceGetMarginTemperature; a thermal clock-event reason counts as hot too)",
    )
    power_limit_share: float = Field(
        default=0.98,
        gt=0,
        le=2,
        description="a minute is power-limited when the draw reached this share of the enforced power limit (a "
        "power-brake or power-cap clock-event reason counts too); the guide asks for slowdown together with "
        "power or temperature limits, not slowdown alone",
    )
    # --- NVML, the node's GPUs and the cluster's view ------------------------------------------------
    nvml_unresponsive_s: float = Field(
        default=30.0,
        ge=0,
        description="NVML calls timing out for this long are a fault of the node's driver (gpud asks for a "
        "reboot on any NVML error; a single slow call is not one)",
    )
    allocatable_grace_s: float = Field(
        default=120.0,
        ge=0,
        description="nvidia.com/gpu allocatable below capacity (or capacity below the expected count) for this "
        "long on a Ready node is a fault (the kubelet re-registers a restarted device plugin's devices within "
        "seconds)",
    )
    device_plugin_not_ready_s: float = Field(
        default=120.0,
        ge=0,
        description="the node's device plugin pod not ready for this long is a fault (CrashLoopBackOff is one at "
        "once): a rolling update replaces it well within this",
    )


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

    # --- health signals ----------------------------------------------------------------------------
    health: HealthPolicy = Field(
        default_factory=HealthPolicy,
        description="the thresholds and windows of the health signals beyond the kernel log (docs/signals.md)",
    )
