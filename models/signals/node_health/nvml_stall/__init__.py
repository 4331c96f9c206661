"""NVML unresponsive: its calls time out (the agent abandons each after `nvml_call_timeout_s`). For
`nvml_unresponsive_s` or longer that is a fault of the node's driver, not a stuck agent: the agent
keeps reading the kernel log and publishing, and says so. A driver that hangs NVML needs the node
rebooted (gpud: any NVML error asks for a reboot); NVSentinel's users saw DCGM stall on a degrading
GPU so that its ECC errors were never reported, which this makes a fault of its own.
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.node_health.records import NodeGpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction


def check(rec: NodeGpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    if rec.nvml != "unresponsive":
        return ()
    onset = rec.since.get("nvml", rec.observed_at)
    stuck_s = (rec.observed_at - onset).total_seconds()
    if stuck_s < policy.nvml_unresponsive_s:
        return ()
    calls = ", ".join(rec.nvml_stuck) or "its calls"
    return (Finding(
        "nvml_unresponsive", Family.DRIVER, Category.DRIVER,
        f"NVML has not answered for {stuck_s:.0f} s ({calls} timed out; threshold {policy.nvml_unresponsive_s:g} s): "
        "the driver is hung; the agent itself runs on",
        onset, ImmediateAction.RESTART_BM, None, "NVML unresponsive", details={"stuck_calls": list(rec.nvml_stuck)}),)
