"""Build the cordon executor from settings (the composition root of the cluster actions)."""

from __future__ import annotations

from typing import Any

from history.engine import make_engine
from history.migrate import upgrade
from models.cordon_policy import CordonPolicy
from respond.cordon.action_log import ActionStore, JsonlActionStore, SqlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import api_client
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
    (the responder's Lease election; None for one replica and the command line)."""
    policy = policy or load_policy(settings.policy_file)
    api = api or api_client(settings)
    nodes = None
    if api is not None:
        nodes = KubeCluster(api, reporting_instance=settings.reporting_instance,
                            backoff=Backoff(deadline_s=settings.api_deadline_s), fence=fence,
                            write_timeout_s=settings.api_write_timeout_s)
    return CordonExecutor(policy, store_from(settings, database_url), nodes, dry_run=settings.dry_run,
                          conflict_retries=settings.conflict_retries)
