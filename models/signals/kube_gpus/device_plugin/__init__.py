"""The NVIDIA device plugin on the node unhealthy: its pod in CrashLoopBackOff (at once), or not ready
for `device_plugin_not_ready_s`. Without it the kubelet offers none of the node's GPUs; the
operations guide's section 十六 sees it crash-loop when the driver did not come up after a kernel
upgrade, so it joins the node's driver fault when they come together.
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.kube_gpus.records import KubeGpuView
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family


def check(rec: KubeGpuView, policy: HealthPolicy) -> tuple[Finding, ...]:
    if rec.plugin_pod is None or rec.plugin_ready is not False or not rec.node_ready:
        return ()
    onset = rec.since.get("plugin", rec.observed_at)
    held = (rec.observed_at - onset).total_seconds()
    looping = rec.plugin_waiting == "CrashLoopBackOff"
    if not looping and held < policy.device_plugin_not_ready_s:
        return ()
    state = f"in {rec.plugin_waiting}" if rec.plugin_waiting else f"not ready for {held:.0f} s"
    return (Finding(
        "device_plugin", Family.DRIVER, Category.DRIVER,
        f"the device plugin {rec.plugin_pod} is {state} ({rec.plugin_restarts or 0} restarts): the node offers "
        "no GPUs to new pods",
        onset, None, None, "GPU device plugin unhealthy",
        details={"pod": rec.plugin_pod, "restarts": rec.plugin_restarts, "waiting": rec.plugin_waiting}),)
