"""Build the remediator from the responder's executor (the composition root calls this)."""

from __future__ import annotations

from respond.cordon.executor import CordonExecutor
from respond.remediation.intake import Intake
from respond.remediation.loop import Remediator
from respond.remediation.port import LoopCluster
from service.metrics import ResponderMetrics


def build_remediator(executor: CordonExecutor, *, service_account: str = "xidpipe-remediation",
                     metrics: ResponderMetrics | None = None) -> Remediator | None:
    """The remediator of `executor`'s loops, or None when the policy's remediation is off, no cluster is
    configured or the action record is not in a database."""
    intake = next((p for p in executor.ports if isinstance(p, Intake)), None)
    if not executor.policy.remediation.enabled or intake is None or not isinstance(executor.nodes, LoopCluster):
        return None
    return Remediator(intake.store, executor.nodes, executor, service_account=service_account, metrics=metrics)
