"""Settings of the cluster actions: one object, loaded once at start (env prefix `XIDPIPE_ACTIONS_`)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ActionSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_ACTIONS_", extra="ignore")

    policy_file: Path | None = Field(default=None, description="cordon policy YAML (None: the documented defaults)")
    cluster: Literal["none", "kubeconfig", "in-cluster"] = Field(
        default="none",
        description="where to act: 'none' records every decision as a dry run (the embedded default), "
        "'kubeconfig' uses a kubeconfig file, 'in-cluster' the pod's service account",
    )
    kubeconfig: Path | None = Field(default=None, description="kubeconfig file (None: $KUBECONFIG or ~/.kube/config)")
    context: str | None = Field(default=None, description="kubeconfig context")
    dry_run: bool = Field(default=False, description="decide and record, change nothing (also a policy key)")
    database_url: SecretStr | None = Field(
        default=None, description="SQLAlchemy URL for the `actions` table; None: the JSON Lines action log"
    )
    action_log: Path = Field(default=Path("xidpipe-actions.jsonl"), description="JSON Lines action log")
    reporting_instance: str = Field(
        default_factory=socket.gethostname, description="Event reportingInstance (the pod name in a cluster)"
    )
    api_deadline_s: float = Field(
        default=30.0, gt=0, description="how long one API call is retried on 429, 5xx and connection errors"
    )
    conflict_retries: int = Field(
        default=8, ge=1, description="re-reads of a node whose resourceVersion moved during a cordon or release"
    )
