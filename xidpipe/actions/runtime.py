"""Build the cordon executor from settings (the composition root of the cluster actions)."""

from __future__ import annotations

from kubernetes import client

from models.cordon_policy import CordonPolicy
from xidpipe.actions.executor import CordonExecutor
from xidpipe.actions.k8s import KubeNodes, api_client_from_kubeconfig, api_client_in_cluster
from xidpipe.actions.policy_file import load_policy
from xidpipe.actions.retry import Backoff
from xidpipe.actions.settings import ActionSettings
from xidpipe.actions.store import ActionStore, open_store


def api_client(settings: ActionSettings) -> client.ApiClient | None:
    if settings.cluster == "kubeconfig":
        return api_client_from_kubeconfig(str(settings.kubeconfig) if settings.kubeconfig else None, settings.context)
    if settings.cluster == "in-cluster":
        return api_client_in_cluster()
    return None


def store_from(settings: ActionSettings) -> ActionStore:
    url = settings.database_url.get_secret_value() if settings.database_url else None
    return open_store(url, settings.action_log)


def build_executor(settings: ActionSettings, policy: CordonPolicy | None = None,
                   api: client.ApiClient | None = None) -> CordonExecutor:
    """The executor for these settings; the policy file is loaded and validated here (PolicyError if bad)."""
    policy = policy or load_policy(settings.policy_file)
    api = api or api_client(settings)
    nodes = None
    if api is not None:
        nodes = KubeNodes(api, reporting_instance=settings.reporting_instance,
                          backoff=Backoff(deadline_s=settings.api_deadline_s))
    return CordonExecutor(policy, store_from(settings), nodes, dry_run=settings.dry_run,
                          conflict_retries=settings.conflict_retries)
