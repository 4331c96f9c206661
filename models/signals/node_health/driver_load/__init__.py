"""A driver that failed to load: NVIDIA GPUs on the PCI bus, and no driver to drive them.

The operations guide's section 十六 (after a kernel upgrade every GPU is gone): the kernel module
was not built for the running kernel, or the kernel refused it (Secure Boot), or the user-space
library and the module disagree. The decision says which, from what the node shows: the running
kernel against the kernels a module is installed for, the lockdown and the module's signature, and
NVML's error. A fault of the node's driver, with the section's runbook.
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.node_health.records import NodeGpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction


def why(rec: NodeGpuHealth) -> str | None:
    """Why the driver does not drive the node's GPUs, or None when it does (NVML answers: it is loaded)."""
    if rec.nvml != "unavailable":
        return None
    kernel = rec.kernel_release or "the running kernel"
    if rec.driver_version is None:
        if rec.module_kernels and rec.kernel_release and rec.kernel_release not in rec.module_kernels:
            built = ", ".join(rec.module_kernels)
            return (f"the nvidia kernel module is built for {built} but the node runs {kernel}, which has none: "
                    "the driver was not rebuilt for the new kernel")
        if rec.lockdown not in (None, "none") and rec.module_signed is False:
            return (f"the kernel's lockdown ({rec.lockdown}, Secure Boot) refuses the unsigned nvidia module of "
                    f"{kernel}")
        if not rec.module_kernels:
            return f"no nvidia kernel module is installed (running {kernel})"
        return f"the nvidia kernel module is not loaded on {kernel} (NVML: {rec.nvml_error or 'unavailable'})"
    if rec.nvml_error in ("LibRmVersionMismatch", "DriverNotLoaded"):
        return (f"the kernel module {rec.driver_version} is loaded on {kernel} but NVML fails with "
                f"{rec.nvml_error}: the user-space driver and the module disagree")
    return None


def check(rec: NodeGpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    if not rec.pci_gpus:
        return ()
    reason = why(rec)
    if reason is None:
        return ()
    return (Finding(
        "driver_load", Family.DRIVER, Category.DRIVER,
        f"{len(rec.pci_gpus)} NVIDIA GPUs on the PCI bus and no working driver: {reason}",
        rec.since.get("driver", rec.observed_at), ImmediateAction.UPDATE_SWFW, None,
        "GPU driver failed to load", details={"kernel": rec.kernel_release, "driver": rec.driver_version,
                                              "module_kernels": list(rec.module_kernels), "nvml_error": rec.nvml_error,
                                              "lockdown": rec.lockdown, "module_signed": rec.module_signed}),)
