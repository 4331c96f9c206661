"""Helpers shared by the Kubernetes tests (fixtures are in conftest.py)."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[2]
RBAC_DIR = REPO / "deploy" / "rbac"
CONTROLPLANE_PY = REPO / "deploy" / "testcluster" / "controlplane.py"

PodFactory = Callable[..., client.V1Pod]


def load_controlplane() -> ModuleType:
    """deploy/testcluster/controlplane.py as a module (deploy/ is not a Python package)."""
    name = "xidpipe_testcluster_controlplane"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CONTROLPLANE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def status_of(call: Callable[[], object]) -> int:
    """The HTTP status a client call ends with (200 when it succeeds)."""
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def make_configuration(plane: Any, identity: str) -> client.Configuration:
    """A client Configuration that authenticates as one of the control plane's token identities."""
    return client.Configuration(
        host=plane.server,
        api_key={"BearerToken": plane.token(identity)},
        api_key_prefix={"BearerToken": "Bearer"},
        ssl_ca_cert=str(plane.ca_file),
    )
