"""The chart's Kafka settings for each security protocol, loaded by the settings classes of the
services that read them: SASL keys only with a SASL_* protocol (the classes refuse them otherwise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.podrun import render
from tests.kube import helm_binary

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "xidpipe"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def container_env(docs: list[dict[str, Any]], workload: str) -> dict[str, str]:
    """What the kubelet would give the container: its ConfigMaps, then its env (Secrets as a stand-in
    value, optional ones left out, field references as an address)."""
    data = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    pod = next(d for d in docs if d["kind"] in ("Deployment", "DaemonSet") and d["metadata"]["name"].endswith(workload))
    container = pod["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(data[source["configMapRef"]["name"]])
    for item in container.get("env", []):
        ref = item.get("valueFrom", {})
        if "secretKeyRef" in ref and ref["secretKeyRef"].get("optional"):
            continue
        env[item["name"]] = item.get("value") or ("10.1.2.3" if "fieldRef" in ref else "from-a-secret")
    return env


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_each_protocol_renders_kafka_settings_the_services_load(helm: str, protocol: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.settings import AgentSettings
    from respond.settings import RespondSettings
    from streams.settings import WorkerSettings

    docs = render(helm, CHART, [], [f"kafka.securityProtocol={protocol}"], release="xidpipe", namespace="xidpipe")
    for workload, cls in (("-worker", WorkerSettings), ("-respond", RespondSettings), ("-agent", AgentSettings)):
        env = container_env(docs, workload)
        sasl = {k for k in env if "_SASL_" in k}
        assert bool(sasl) == protocol.startswith("SASL_"), (workload, sorted(sasl))
        with monkeypatch.context() as m:
            for name in [n for n in __import__("os").environ if n.startswith("XIDPIPE_")]:
                m.delenv(name)
            for name, value in env.items():
                m.setenv(name, value)
            settings = cls()
        assert settings.security_protocol == protocol, workload
        assert (settings.sasl_username is not None) == protocol.startswith("SASL_"), workload
