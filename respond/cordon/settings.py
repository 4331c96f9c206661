"""Settings of the cluster actions (`service.config`: its own as `XIDPIPE_ACTIONS_<NAME>`, the shared
Kubernetes connection as `XIDPIPE_KUBE_CONFIG` and `XIDPIPE_KUBE_CONTEXT`): the responder's `actions`
section (`respond.settings.RespondSettings`), and what `xidpipe node` and `xidpipe breaker` read.

Where actions are recorded is not among them: the responder records them in its database, the
commands in the database they are given (`--database-url`, `XIDPIPE_DATABASE_URL`), else in the JSON
Lines log `action_log` (`respond.cordon.runtime.store_from`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from service.config import XidpipeSettings, shared

KubeMode = Literal["none", "kubeconfig", "in-cluster"]


class ActionSettings(XidpipeSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_ACTIONS_")
    service = "actions"

    policy_file: Path | None = Field(default=None, description="cordon policy YAML (None: the documented defaults)")
    kube_config: str = shared(
        "kube_config", "none",
        description="how to reach the Kubernetes API: 'in-cluster' (the pod's ServiceAccount), the path of a "
        "kubeconfig file, or 'none' (no cluster: every cordon decision is recorded as a dry run)",
    )
    kube_context: str | None = shared("kube_context", None, description="the kubeconfig's context (None: current)")
    dry_run: bool = Field(default=False, description="decide and record, change nothing (also a policy key)")
    action_log: Path = Field(default=Path("xidpipe-actions.jsonl"),
                             description="JSON Lines action log of `xidpipe node` and `xidpipe breaker` when they "
                             "are given no database")
    reporting_instance: str = Field(
        default_factory=socket.gethostname, description="Event reportingInstance (the pod name in a cluster)"
    )
    api_deadline_s: float = Field(
        default=30.0, gt=0, description="how long one API call is retried on 429, 5xx and connection errors"
    )
    api_write_timeout_s: float = Field(
        default=4.0, gt=0, description="each write request's timeout (a cordon, an annotation, the condition, an "
        "Event, an eviction): the longest a write can take after the leader's Lease check; with an elected "
        "responder at most lease_duration_s - renew_deadline_s, so a write lands before a standby may take over"
    )
    conflict_retries: int = Field(
        default=8, ge=1, description="re-reads of a node whose resourceVersion moved during a cordon or release"
    )
    remediation_namespace: str = Field(
        default_factory=lambda: os.environ.get("POD_NAMESPACE") or "xidpipe",
        description="where the remediation loop's Jobs run (default: the responder's namespace, POD_NAMESPACE)")
    remediation_service_account: str = Field(
        default="xidpipe-remediation", description="the ServiceAccount of the remediation Jobs (no API rights, "
        "no token mounted)")

    @field_validator("kube_config")
    @classmethod
    def _kube_config(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("kube_config is 'in-cluster', 'none' or the path of a kubeconfig file")
        return value

    @property
    def kube_mode(self) -> KubeMode:
        """none, in-cluster, or kubeconfig (a file: `kubeconfig_path`)."""
        if self.kube_config in ("none", "in-cluster"):
            return self.kube_config  # type: ignore[return-value]
        return "kubeconfig"

    @property
    def kubeconfig_path(self) -> Path | None:
        return Path(self.kube_config).expanduser() if self.kube_mode == "kubeconfig" else None
