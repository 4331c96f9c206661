"""Command-line options shared by the action commands (`node`, `breaker`): cluster, store, policy.

Each option falls back to its `XIDPIPE_ACTIONS_*` environment variable (see `ActionSettings`).
"""

from __future__ import annotations

import argparse
from typing import Any

from respond.cordon.settings import ActionSettings


def add_store_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("action record")
    g.add_argument("--database-url", help="SQLAlchemy URL of the actions table (default: the JSON Lines log)")
    g.add_argument("--action-log", help="JSON Lines action log (default xidpipe-actions.jsonl)")


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--kubeconfig", help="act on the cluster of this kubeconfig")
    g.add_argument("--context", help="kubeconfig context")
    g.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    g.add_argument("--policy", dest="policy_file", help="cordon policy YAML (default: the documented defaults)")
    g.add_argument("--dry-run", action="store_true", default=None, help="decide and record, change nothing")
    add_store_options(p)


def settings_from_args(args: argparse.Namespace) -> ActionSettings:
    overrides: dict[str, Any] = {}
    for key in ("database_url", "action_log", "kubeconfig", "context", "policy_file", "dry_run"):
        value = getattr(args, key, None)
        if value is not None:
            overrides[key] = value
    if getattr(args, "in_cluster", False):
        overrides["cluster"] = "in-cluster"
    elif overrides.get("kubeconfig") or overrides.get("context"):
        overrides["cluster"] = "kubeconfig"
    return ActionSettings(**overrides)
