"""Build the cordon executor from settings (the composition root of the cluster actions)."""

from __future__ import annotations

from typing import Any

from history.engine import make_engine
from history.migrate import upgrade
from models.cordon_policy import CordonPolicy
from respond.cordon.action_log import ActionStore, JsonlActionStore, SqlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes, api_client
from respond.cordon.policy_file import load_policy
from respond.cordon.port import WriteFence
from respond.cordon.retry import Backoff
from respond.cordon.settings import ActionSettings
from respond.quarantine.kube_cluster import KubeCluster

__all__ = ["api_client", "build_executor", "store_from"]


def store_from(settings: ActionSettings, database_url: str | None = None) -> ActionStore:
    """The SQL action record in `database_url` (the database migrated to head first), else the JSON
    Lines log of the settings."""
    if not database_url:
        return JsonlActionStore(settings.action_log)
    engine = make_engine(database_url)
    upgrade(engine)
    return SqlActionStore(engine)


def build_executor(settings: ActionSettings, policy: CordonPolicy | None = None, api: Any = None,
                   database_url: str | None = None, fence: WriteFence | None = None) -> CordonExecutor:
    """The executor for these settings, recording in `database_url` (None: the JSON Lines log); the
    policy file is loaded and validated here (PolicyError if bad).

    `api`: the Kubernetes API client to act through; `api_client(settings)` when not given (None:
    no cluster, every decision is recorded as a dry run). `fence`: asked before every cluster write
    (the responder's Lease election; None for one replica and the command line). With the policy's
    remediation on, the node adapter is the remediation loop's too (`respond.remediation.kube_jobs`)
    and the executor opens loops through its `remediate` step (`respond.remediation.intake`; it needs
    the database)."""
    policy = policy or load_policy(settings.policy_file)
    api = api or api_client(settings)
    remediating = policy.remediation.enabled
    nodes: KubeNodes | None = None
    common: dict[str, Any] = {"reporting_instance": settings.reporting_instance,
                              "backoff": Backoff(deadline_s=settings.api_deadline_s), "fence": fence,
                              "write_timeout_s": settings.api_write_timeout_s}
    if api is not None and remediating:
        from respond.remediation.kube_jobs import KubeRemediation

        nodes = KubeRemediation(api, namespace=settings.remediation_namespace, **common)
    elif api is not None:
        nodes = KubeCluster(api, **common)
    store = store_from(settings, database_url)
    ports: list[object] = []
    if remediating and isinstance(store, SqlActionStore):  # the loops live in the database beside the record
        from history.remediation_store import RemediationStore
        from respond.remediation.intake import Intake

        ports.append(Intake(RemediationStore(store.engine), policy))
    return CordonExecutor(policy, store, nodes, dry_run=settings.dry_run, conflict_retries=settings.conflict_retries,
                          ports=ports)
