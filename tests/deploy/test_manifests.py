"""The Helm chart's workloads (deploy/helm/xidpipe, rendered with its defaults) run real xidpipe
commands with the identities and files they need."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube import CHART, helm_binary
from xidpipe.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _entrypoint() -> list[str]:
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        m = re.match(r"\s*ENTRYPOINT\s+(\[.*\])\s*$", line)
        if m:
            return list(json.loads(m.group(1)))
    return []


@functools.cache
def _docs() -> list[dict[str, Any]]:
    cmd = [helm_binary(), "template", "xidpipe", str(CHART), "--namespace", "xidpipe"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"helm template failed: {proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    found = []
    for doc in _docs():
        spec = doc.get("spec", {}).get("template", {}).get("spec")
        if spec:
            for c in spec.get("containers", []):
                found.append((f"{doc['kind']}:{doc['metadata']['name']}/{c['name']}", c, spec))
    return found


def _workloads() -> dict[str, dict[str, Any]]:
    return {w.split(":")[1].split("/")[0]: spec for w, _, spec in _containers()}


def _by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name)




def test_the_image_entrypoint_is_xidpipe() -> None:
    assert _entrypoint() == ["xidpipe"]


def test_there_are_workloads() -> None:
    assert {"xidpipe-agent", "xidpipe-worker", "xidpipe-respond", "xidpipe-web"} <= set(_workloads())


def test_containers_run_real_xidpipe_commands() -> None:
    containers = _containers()
    assert len(containers) >= 4
    for where, container, _ in containers:
        argv = [*(container.get("command") or _entrypoint()), *(container.get("args") or [])]
        assert argv[:1] == ["xidpipe"], f"{where}: runs {argv}"
        try:
            args = build_parser().parse_args(argv[1:])
        except SystemExit as exc:
            pytest.fail(f"{where}: `{' '.join(argv)}` is not a valid xidpipe command ({exc.code})")
        assert callable(getattr(args, "func", None))
        sc = container.get("securityContext", {})
        assert sc.get("privileged") is not True and sc.get("allowPrivilegeEscalation") is False, where
        assert container.get("resources", {}).get("limits"), f"{where}: no resource limits"


def test_the_responder_acts_with_the_rbac_identity_and_the_worker_with_its_tokenreview_one() -> None:
    by_name = _workloads()
    respond_sa = by_name["xidpipe-respond"]["serviceAccountName"]
    stream_sa = by_name["xidpipe-worker"]["serviceAccountName"]
    assert respond_sa != stream_sa
    subjects = {b["metadata"]["name"]: b["subjects"] for b in _docs() if b["kind"] == "ClusterRoleBinding"}
    assert subjects["xidpipe-worker"] == [{"kind": "ServiceAccount", "name": respond_sa, "namespace": "xidpipe"}]
    assert subjects["xidpipe-stream"] == [{"kind": "ServiceAccount", "name": stream_sa, "namespace": "xidpipe"}]
    rules = _by_kind("ClusterRole", "xidpipe-stream")["rules"]
    assert rules == [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}]


def test_every_kafka_client_authenticates_and_the_worker_verifies_node_identity() -> None:
    data: dict[str, str] = {}
    for doc in _docs():
        if doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] != "xidpipe-policy":
            data |= doc.get("data") or {}
    for prefix in ("XIDPIPE_AGENT_", "XIDPIPE_WORKER_", "XIDPIPE_RESPOND_"):
        assert data[f"{prefix}SECURITY_PROTOCOL"] == "SASL_SSL" and data[f"{prefix}SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert data["XIDPIPE_WORKER_VERIFY_NODE_IDENTITY"] == "true"
    spec = _workloads()["xidpipe-agent"]
    volume = next(v for v in spec["volumes"] if v["name"] == "identity")
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "identity")["mountPath"]
    assert token["audience"] == data["XIDPIPE_WORKER_NODE_IDENTITY_AUDIENCE"]
    assert data["XIDPIPE_AGENT_IDENTITY_TOKEN_FILE"] == f"{mount}/{token['path']}"


def test_the_web_server_reads_its_tokens_from_a_secret_and_listens_where_probed() -> None:
    spec = _workloads()["xidpipe-web"]
    (c,) = spec["containers"]
    args = build_parser().parse_args(c["args"])
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert str(args.tokens_file).startswith(mounts["tokens"] + "/") and "secret" in volumes["tokens"]
    assert args.host == "0.0.0.0" and c["ports"][0]["containerPort"] == args.port
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec.get("automountServiceAccountToken") is False


def test_environment_names_are_settings_that_exist() -> None:
    """Every XIDPIPE_* variable the chart sets is a setting a service reads."""
    from xidpipe.commands.config import env_names

    known = env_names()
    names: set[str] = set()
    for doc in _docs():
        if doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] != "xidpipe-policy":
            names |= set((doc.get("data") or {}).keys())
    for _, c, _ in _containers():
        names |= {e["name"] for e in c.get("env", [])}
    unknown = sorted(n for n in names if n.startswith("XIDPIPE_") and n not in known)
    assert not unknown, f"no service reads {unknown} (docs/configuration.md lists the settings)"
