"""The Helm chart's rendered pods run from the image (issue 17, point 3).

The chart is rendered fresh with tests/deploy/pods-values.yaml (image ``xidpipe:dev``, Kafka over
SASL_SSL with ACLs as in production, the cordon policy in dry run) plus the test services'
addresses; each workload's pod template is admitted as a Pod by the test kube-apiserver and run by
``tests/deploy/podrun.py`` with podman, which does what the kubelet does first (users, volumes,
tokens, env; see its docstring). The agent reads a recorded kernel log (xidpipe/samples/cluster/gpu-node-03.log)
as its default journald source reads a node's journal: journal files of the node's
machine id under /var/log/journal, written by ``systemd-journal-remote`` from an export of the
recorded lines. The GPU falling off the bus in that log must come through: an incident in
PostgreSQL, a dry-run cordon decision in the action log, a ticket in the responder's file outbox.
Two runs through the same runner must fail: a root ``runAsUser`` under ``runAsNonRoot``, and an
agent whose journalctl is missing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kubernetes import client

from models.ticket_policy import incident_label
from tests.deploy.podrun import Cluster, Kubelet, Podman, PodNotReady, PodRefused, Prepared, render
from tests.kube import helm_binary, unique
from tests.polling import poll
from tests.services import SecuredKafka, service_unavailable

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "xidpipe"
VALUES = Path(__file__).with_name("pods-values.yaml")
RECORDED_LOG = ROOT / "xidpipe" / "samples" / "cluster" / "gpu-node-03.log"
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CA_CONFIGMAP = "kafka-ca"
# Generous on two shared cores: a cold Python start of each command, migrations, Kafka group joins.
READY_S = float(os.environ.get("XIDPIPE_TEST_POD_READY_S", "240"))
THROUGH_S = 240.0



@pytest.fixture(scope="session")
def helm() -> str:
    return helm_binary()


@pytest.fixture(scope="session")
def image(xidpipe_image: str) -> str:
    if shutil.which("runc") is None:
        service_unavailable("runc", "not installed (apt-get install runc)")
    return xidpipe_image


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def journal_export(log: Path, boot_id: str, machine_id: str, end: float) -> str:
    """The recorded `[ctime] message` lines as journald kernel entries, moved in time to end at `end`."""
    lines = []
    for raw in log.read_text().splitlines():
        match = re.match(r"\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\] (.*)", raw)
        if match:
            lines.append((datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y").timestamp(), match.group(2)))
    shift = end - lines[-1][0]
    first = lines[0][0]
    entries = []
    for i, (at, message) in enumerate(lines):
        entries.append(
            f"__CURSOR=s={boot_id};i={i + 1}\n__REALTIME_TIMESTAMP={int((at + shift) * 1e6)}\n"
            f"__MONOTONIC_TIMESTAMP={int((at - first + 100) * 1e6)}\n_BOOT_ID={boot_id}\n"
            f"_MACHINE_ID={machine_id}\n_TRANSPORT=kernel\nPRIORITY=4\nSYSLOG_FACILITY=0\n"
            f"SYSLOG_IDENTIFIER=kernel\nMESSAGE={message}\n\n"
        )
    return "".join(entries)


def recorded_node(root: Path) -> None:
    """A node's file system as the agent's hostPath volumes see it, with the recorded kernel log in
    its persistent journal."""
    if not JOURNAL_REMOTE.is_file():
        service_unavailable("systemd-journal-remote", "not installed: run `make services`")
    # The current boot's (the pods share this kernel, as a node's pods share its): `journalctl --follow`
    # (systemd 252) reads only the current boot of the local journal.
    machine_id, boot_id = uuid.uuid4().hex, BOOT_ID.read_text().strip().replace("-", "")
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "machine-id").write_text(machine_id + "\n")
    journal = root / "var" / "log" / "journal" / machine_id
    journal.mkdir(parents=True)
    export = journal_export(RECORDED_LOG, boot_id, machine_id, time.time() - 5)
    subprocess.run([str(JOURNAL_REMOTE), f"--output={journal / 'system.journal'}", "-"], input=export.encode(),
                   check=True, capture_output=True, timeout=60)
    (root / "var" / "lib" / "kubelet" / "pod-resources").mkdir(parents=True)


@dataclass
class Stack:
    """The chart installed on the test apiserver and its pods run by podman."""

    cluster: Cluster
    helm: str
    workdir: Path
    node: str
    database: str
    kafka: SecuredKafka
    release: str = field(default_factory=lambda: unique("xp"))
    pods: dict[str, Prepared] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.podman = Podman(self.workdir)
        passthrough = frozenset({"/dev/kmsg", "/proc"})  # the node's own, as on a real node
        self.kubelet = Kubelet(self.cluster, self.workdir / "pods", self.workdir / "node", passthrough)
        self.ports = {"agent": free_port(), "web": free_port(), "worker": free_port(), "respond": free_port(),
                      "web-metrics": free_port()}

    @property
    def namespace(self) -> str:
        return f"{self.release}-ns"

    def render(self, *sets: str) -> list[dict[str, Any]]:
        return render(self.helm, CHART, [VALUES], [
            f"kafka.bootstrapServers={self.kafka.bootstrap}",
            f"kafka.caConfigMap={CA_CONFIGMAP}",
            f"agent.namespace={self.release}-agent",
            f"agent.metricsPort={self.ports['agent']}",
            f"worker.metricsPort={self.ports['worker']}",
            f"respond.metricsPort={self.ports['respond']}",
            f"web.port={self.ports['web']}",
            f"web.metricsPort={self.ports['web-metrics']}",
            *sets,
        ], release=self.release, namespace=self.namespace)

    def secrets(self) -> list[dict[str, Any]]:
        """The Secrets an administrator makes beside the chart (docs/security.md), with test values."""
        def secret(name: str, ns: str, data: dict[str, str]) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
                    "stringData": data}

        pw = self.kafka.passwords
        ca = {"ca.crt": Path(self.kafka.broker.ca_file).read_text()}
        return [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CA_CONFIGMAP, "namespace": ns}, "data": ca}
            for ns in (self.namespace, f"{self.release}-agent")
        ] + [
            secret("xidpipe", self.namespace, {"database-url": self.database}),
            secret("xidpipe-worker-kafka", self.namespace, {"password": pw["worker"]}),
            secret("xidpipe-responder-kafka", self.namespace, {"password": pw["responder"]}),
            secret("xidpipe-api-tokens", self.namespace, {"tokens": f"ci read {secrets.token_hex(16)}\n"}),
            secret("xidpipe-agent-kafka", f"{self.release}-agent", {"username": "agent", "password": pw["agent"]}),
        ]

    def start(self, components: tuple[str, ...], *sets: str, ready_s: float = READY_S,
              settle_s: float = 0.0) -> dict[str, Prepared]:
        """Install the chart rendered with `sets`, admit one Pod per component's workload, prepare
        and play them all, then wait until each is ready (PodRefused / PodNotReady otherwise)."""
        docs = self.render(*sets)
        self.cluster.install(docs, self.secrets())
        self.cluster.node(self.node)
        workloads = {d["metadata"]["name"].rsplit("-", 1)[1]: d for d in docs
                     if d["kind"] in ("Deployment", "DaemonSet")}
        for name in components:
            self.pods[name] = self.kubelet.prepare(self.cluster.admit(workloads[name], self.node))
        for name in components:
            self.podman.play(self.pods[name])
        try:
            for name in components:
                self.podman.wait_ready(self.pods[name], ready_s, settle_s)
        except PodNotReady as exc:
            others = [self.podman.logs(p) for p in self.pods.values() if p.name not in str(exc)]
            raise PodNotReady("\n".join([str(exc), *others])) from None
        return self.pods


@pytest.fixture
def stack(helm: str, image: str, control_plane: Any, admin_client: client.ApiClient, postgres_database: str,
          secured_kafka: SecuredKafka, tmp_path: Path) -> Iterator[Stack]:
    secured_kafka.grant_pipeline("", worker_group="xidpipe-worker", responder_group="xidpipe-responder")
    cluster = Cluster(admin_client, control_plane.server, Path(control_plane.ca_file))
    recorded_node(tmp_path / "node")
    made = Stack(cluster, helm, tmp_path, unique("gpu-node"), postgres_database, secured_kafka)
    try:
        yield made
    finally:
        problems = made.podman.down()
        assert problems == [], problems


def all_logs(stack: Stack) -> str:
    return "\n".join(stack.podman.logs(p) for p in stack.pods.values())


def test_the_charts_pods_run_from_the_image_and_a_recorded_fault_goes_through(stack: Stack) -> None:
    pods = stack.start(("worker", "respond", "web", "agent"))
    engine = sa.create_engine(stack.database)
    logs = lambda: all_logs(stack)  # noqa: E731

    def incident() -> dict[str, Any] | None:
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT * FROM incidents WHERE node = :n AND family = 'gpu_lost'"),
                               {"n": stack.node}).mappings().first()
        return dict(row) if row else None

    def cordon() -> dict[str, Any] | None:
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT * FROM actions WHERE node = :n AND action = 'cordon'"),
                               {"n": stack.node}).mappings().first()
        return dict(row) if row else None

    outbox = pods["respond"].volumes["data"] / "outbox" / "jira"

    def ticket() -> dict[str, Any] | None:
        for path in sorted(outbox.glob("*/ticket.json")) if outbox.is_dir() else []:
            body = json.loads(path.read_text())
            if stack.node in json.dumps(body):
                return dict(body)
        return None

    try:
        found = poll("the Xid 79 incident in PostgreSQL", incident, THROUGH_S, interval=1.0, context=logs)
        decision = poll("the cordon decision in the action log", cordon, THROUGH_S, interval=1.0, context=logs)
        opened = poll("the outbox ticket", ticket, THROUGH_S, interval=1.0, context=logs)
    finally:
        engine.dispose()
    assert found["pci"].startswith("0000:63:00"), found
    assert decision["dry_run"] is True and decision["incident_id"] == found["incident_id"], decision
    assert incident_label(found["incident_id"]) in opened["labels"], opened  # how a ticket names its incident


def test_a_root_run_as_user_is_refused_under_run_as_non_root(stack: Stack) -> None:
    with pytest.raises(PodRefused, match="runAsUser breaks non-root policy"):
        stack.start(("worker",), "podSecurity.runAsUser=0")


def test_the_agent_without_journalctl_is_not_ready(stack: Stack) -> None:
    with pytest.raises(PodNotReady, match="xidpipe-agent"):
        # Ready in seconds with its journalctl (the run above); a minute is ample to tell.
        stack.start(("agent",), "agent.extraEnv.XIDPIPE_AGENT_JOURNALCTL=/usr/bin/journalctl-absent",
                    ready_s=60, settle_s=30)
