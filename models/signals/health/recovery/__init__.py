"""The GPU recovery action (NVML field 230, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): what the driver says
the GPU needs now. Anything but NONE is a fault with that action; its family is the recovery action's,
so it joins the Xid 154 (and the GSP fault before it) that the driver logs with the same change.
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.health.records import GpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction

# NVIDIA's recovery actions (nvmlDeviceGpuRecoveryAction_t) and the catalog action each asks for.
ACTIONS: dict[int, tuple[str, ImmediateAction]] = {
    1: ("GPU_RESET", ImmediateAction.RESET_GPU),
    2: ("NODE_REBOOT", ImmediateAction.RESTART_BM),
    3: ("DRAIN_P2P", ImmediateAction.XID_154),
    4: ("DRAIN_AND_RESET", ImmediateAction.RESET_GPU),
    5: ("RECOVER_IMEX_DOMAIN", ImmediateAction.XID_154),
    6: ("BUS_RESET", ImmediateAction.RESTART_BM),
    7: ("SYSTEM_REBOOT", ImmediateAction.RESTART_BM),
}


def check(rec: GpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    value = rec.reading.recovery_action
    if not value:
        return ()
    name, action = ACTIONS.get(value, (f"UNKNOWN_{value}", ImmediateAction.XID_154))
    return (Finding(
        "recovery_action", Family.RECOVERY_ACTION, Category.DRIVER,
        f"the driver's GPU recovery action is {name} ({value}): the GPU needs it before it is used again",
        rec.since.get("recovery_action", rec.observed_at), action, None,
        "GPU recovery action (NVML field 230)", details={"recovery_action": name, "value": value}),)
