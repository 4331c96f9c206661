"""Command-line options shared by the action commands (`node`, `breaker`): cluster, store, policy.

Each option falls back to its setting (`ActionSettings`: `XIDPIPE_KUBE_CONFIG`, `XIDPIPE_KUBE_CONTEXT`,
`XIDPIPE_ACTIONS_*`; the database: `CliSettings`, `XIDPIPE_DATABASE_URL`; or the config file), and is
accepted before or after the action (`xidpipe breaker --action-log F status`). A command that needs a
cluster or an action record and has none configured is refused with the setting to set, never run
as a silent dry run or against a record it would create empty.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from respond.cordon.settings import ActionSettings
from xidpipe.commands.exits import Unavailable, UsageError

NO_CLUSTER = ("no cluster configured: give --kubeconfig FILE (and --context), --in-cluster, or set "
              "XIDPIPE_KUBE_CONFIG; --dry-run records the decision without a cluster")


def store_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    g = p.add_argument_group("action record")
    g.add_argument("--database-url", metavar="URL",
                   help="SQLAlchemy URL of the actions table (default: $XIDPIPE_DATABASE_URL, else the "
                   "JSON Lines log)")
    g.add_argument("--action-log", metavar="FILE",
                   help="JSON Lines action log (default: $XIDPIPE_ACTIONS_ACTION_LOG, else xidpipe-actions.jsonl)")
    return p


def cluster_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, parents=[store_parent()], argument_default=argparse.SUPPRESS)
    g = p.add_argument_group("cluster")
    g.add_argument("--kubeconfig", metavar="FILE", help="act on the cluster of this kubeconfig")
    g.add_argument("--context", help="kubeconfig context")
    g.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    g.add_argument("--policy", dest="policy_file", metavar="FILE",
                   help="cordon policy YAML (default: the documented defaults)")
    g.add_argument("--dry-run", action="store_true", help="decide and record, change nothing")
    return p


def settings_from_args(args: argparse.Namespace) -> ActionSettings:
    from pydantic import ValidationError

    overrides: dict[str, Any] = {}
    for key in ("action_log", "policy_file", "dry_run"):
        value = getattr(args, key, None)
        if value is not None:
            overrides[key] = value
    if getattr(args, "context", None):
        overrides["kube_context"] = args.context
    if getattr(args, "in_cluster", False):
        overrides["kube_config"] = "in-cluster"
    elif getattr(args, "kubeconfig", None):
        overrides["kube_config"] = str(args.kubeconfig)
    elif overrides.get("kube_context"):  # a context of the default kubeconfig
        overrides["kube_config"] = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
    try:
        return ActionSettings(**overrides)
    except ValidationError as exc:
        raise UsageError(f"bad action settings: {exc}") from None


def require_cluster(settings: ActionSettings) -> None:
    """A command that changes a node needs a cluster, or an explicit --dry-run."""
    if settings.kube_mode == "none" and not settings.dry_run:
        raise UsageError(NO_CLUSTER)


def record_database(args: argparse.Namespace) -> str | None:
    """The database the actions are recorded in (`--database-url`, else the settings'); None: the JSON
    Lines action log."""
    from xidpipe.commands.cli_settings import configured_database

    return configured_database(args)


def require_record(settings: ActionSettings, url: str | None) -> None:
    """The action record (in `url`, else the JSON Lines log) must already exist: a typo'd path is an
    error, never a new empty record."""
    if url:
        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else None
        if path and path != ":memory:" and not os.path.exists(path):
            raise Unavailable(f"no database at {path}: check --database-url (or XIDPIPE_DATABASE_URL)")
        return
    log = settings.action_log
    if not log.exists() and not log.with_name(log.name + ".breaker.json").exists():
        raise Unavailable(f"no action record: {log} does not exist; give --action-log FILE, or "
                         "--database-url URL (or set XIDPIPE_DATABASE_URL) where the responder records")
