"""The Helm chart deploy/helm/xidpipe: lint, render, and admission of what it renders.

helm is built by ``deploy/testcluster/build.sh`` (``make testcluster``); under ``CI=true`` a
missing helm fails these tests, elsewhere they are skipped. The admission tests apply the
rendered objects server-side to the real kube-apiserver of ``tests/kube.py`` into namespaces that
enforce Pod Security Standards, and submit each workload's pod template as a Pod (dry run: no
kubelet runs), which is what Pod Security admission judges.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from tests.kube import helm_binary, unique
from xidpipe.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "xidpipe"
PRODUCTION = Path(__file__).with_name("helm-production-values.yaml")
VALUES = {"default": [], "production": [PRODUCTION]}
WORKLOADS = ("Deployment", "DaemonSet")
CLUSTER_SCOPED = (
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
MANAGER = "xidpipe-helm-test"

Doc = dict[str, Any]


@pytest.fixture(scope="session")
def helm() -> str:
    return helm_binary()


def render(
    helm: str, values: list[Path], *sets: str, release: str = "xidpipe", namespace: str = "xidpipe"
) -> list[Doc]:
    cmd = [helm, "template", release, str(CHART), "--namespace", namespace]
    for path in values:
        cmd += ["--values", str(path)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"helm template failed: {proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def pod_spec(doc: Doc) -> Doc:
    return dict(doc["spec"]["template"]["spec"])


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_helm_lint_is_clean(helm: str, values: list[Path]) -> None:
    cmd = [helm, "lint", "--strict", str(CHART), *[a for p in values for a in ("--values", str(p))]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr


def test_the_default_policy_is_the_documented_example(helm: str) -> None:
    (policy,) = [d for d in render(helm, []) if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "xidpipe-policy"]
    example = yaml.safe_load((DEPLOY / "policy.example.yaml").read_text())
    assert yaml.safe_load(policy["data"]["policy.yaml"]) == example


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_rendered_pods_run_real_commands_with_settings_that_exist(helm: str, values: list[Path]) -> None:
    from xidpipe.commands.config import env_names

    known = env_names()
    docs = render(helm, values)
    names = {
        k for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] != "xidpipe-policy" for k in d["data"]
    }
    workloads = [d for d in docs if d["kind"] in WORKLOADS]
    assert {d["metadata"]["name"] for d in workloads} == {
        "xidpipe-agent",
        "xidpipe-worker",
        "xidpipe-respond",
        "xidpipe-web",
    }
    for doc in workloads:
        for c in pod_spec(doc)["containers"]:
            args = build_parser().parse_args(c["args"])
            assert callable(getattr(args, "func", None)), doc["metadata"]["name"]
            assert c["resources"]["limits"] and c["securityContext"]["allowPrivilegeEscalation"] is False
            names |= {e["name"] for e in c.get("env", [])}
    unknown = sorted(n for n in names if n.startswith("XIDPIPE_") and n not in known)
    assert not unknown, f"no service reads {unknown} (docs/configuration.md lists the settings)"


def test_secrets_are_referenced_never_held(helm: str) -> None:
    docs = render(helm, [PRODUCTION])
    assert not [d for d in docs if d["kind"] == "Secret"]
    env = {
        e["name"]: e
        for d in docs
        if d["kind"] in WORKLOADS
        for c in pod_spec(d)["containers"]
        for e in c.get("env", [])
    }
    secret_like = [
        n for n in env if any(w in n for w in ("PASSWORD", "TOKEN", "DATABASE_URL", "JIRA_USER", "JIRA_URL"))
    ]
    assert len(secret_like) >= 8  # three Kafka passwords, one database URL, Jira URL, user and token, Slack
    for name in secret_like:
        assert "value" not in env[name] and env[name]["valueFrom"]["secretKeyRef"]["name"], name
    assert env["XIDPIPE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "xidpipe-db", "key": "url"}
    assert env["XIDPIPE_SINKS_SLACK_BOT_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "slack-token"


def test_monitoring_objects_are_rendered_only_when_enabled(helm: str) -> None:
    kinds = {d["kind"] for d in render(helm, [PRODUCTION])}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    docs = render(helm, [PRODUCTION], "serviceMonitor.enabled=true", "prometheusRule.enabled=true")
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "xidpipe-agent-metrics")
    agent = next(d for d in docs if d["kind"] == "DaemonSet")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= agent["spec"]["template"]["metadata"]["labels"].items()
    rules = next(d for d in docs if d["kind"] == "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert "XidpipeAgentDown" in {r["alert"] for r in rules}


def test_every_service_is_probed_and_scraped_on_its_metrics_endpoint(helm: str) -> None:
    docs = render(helm, [PRODUCTION], "serviceMonitor.enabled=true")
    workloads = {d["metadata"]["name"].removeprefix("xidpipe-"): d for d in docs if d["kind"] in WORKLOADS}
    services = [d for d in docs if d["kind"] == "Service"]
    monitors = {d["metadata"]["name"].removeprefix("xidpipe-"): d for d in docs if d["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"agent", "worker", "respond", "web"}
    for name, monitor in monitors.items():
        container = pod_spec(workloads[name])["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        endpoint = monitor["spec"]["endpoints"][0]
        assert endpoint["path"] == "/metrics" and endpoint["port"] in ports, name
        service = next(s for s in services if monitor["spec"]["selector"]["matchLabels"].items()
                       <= s["metadata"]["labels"].items())
        assert service["spec"]["selector"].items() <= workloads[name]["spec"]["template"]["metadata"]["labels"].items()
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert container["livenessProbe"]["httpGet"]["port"] in ports
        if name != "agent":  # the agent's readiness would only say Kafka is away: it spools meanwhile
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", name
    from respond.settings import RespondSettings
    from streams.settings import WorkerSettings
    from xidpipe.commands.serve_settings import ServeSettings

    assert monitors["web"]["spec"]["endpoints"][0]["port"] == "metrics"  # not the public port
    for name, settings in (("worker", WorkerSettings), ("respond", RespondSettings), ("web", ServeSettings)):
        prefix = str(settings.model_config["env_prefix"]).upper()
        container = pod_spec(workloads[name])["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert env[f"{prefix}METRICS_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        assert int(env[f"{prefix}METRICS_PORT"]["value"]) == ports["metrics"]


def test_the_web_servers_trusted_proxies_are_a_chart_value(helm: str) -> None:
    def web(*sets: str) -> tuple[dict[str, Any], dict[str, Any]]:
        docs = render(helm, [PRODUCTION], *sets)
        deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "xidpipe-web")
        policy = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "xidpipe-web")
        return {e["name"]: e for e in pod_spec(deployment)["containers"][0]["env"]}, policy

    env, policy = web()
    assert "XIDPIPE_WEB_TRUSTED_PROXIES" not in env
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == ["http", "metrics"]
    env, _ = web("web.trustedProxies={10.0.0.0/8,192.0.2.7}")
    assert env["XIDPIPE_WEB_TRUSTED_PROXIES"]["value"] == "10.0.0.0/8,192.0.2.7"


def test_the_dashboard_and_the_alerts_query_only_metrics_the_services_expose(helm: str) -> None:
    from agents.metrics import Metrics
    from service.metrics import ResponderMetrics, WebMetrics, WorkerMetrics, exposed_names

    services = [WorkerMetrics(), ResponderMetrics(), WebMetrics()]
    known = {"up"} | exposed_names(Metrics().registry)
    for m in services:
        known |= exposed_names(m.registry)
    docs = render(helm, [PRODUCTION], "prometheusRule.enabled=true", "serviceMonitor.enabled=true",
                  "dashboard.enabled=true")
    board_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "xidpipe-dashboard")
    assert board_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(board_map["data"]["xidpipe.json"])
    panel_exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    rules = [r for d in docs if d["kind"] == "PrometheusRule" for g in d["spec"]["groups"] for r in g["rules"]]
    assert {"XidpipeBreakerTripped", "XidpipeConsumerLagHigh", "XidpipeConsumerLagGrowing", "XidpipeDeadLetters",
            "XidpipeAgentDown", "XidpipeAgentsAbsent", "XidpipeWorkerDown", "XidpipeResponderDown"} <= {
        r["alert"] for r in rules}

    def queried(exprs: list[str]) -> set[str]:
        return {m for e in exprs for m in re.findall(r"\b(?:xidpipe_[a-z0-9_]+|up)\b(?=\s*[{\[)=<> ]|$)", e)}

    assert queried(panel_exprs) - known == set()
    assert queried([r["expr"] for r in rules]) - known == set()
    # Every metric of the worker, the responder and the web has a panel.
    families = {f.name for m in services for f in m.registry.collect()}
    on_board = " ".join(panel_exprs)
    assert [f for f in sorted(families) if not re.search(rf"\b{f}(_total|_bucket|_sum|_count)?\b", on_board)] == []


# --- admission by the real kube-apiserver -------------------------------------------------------


class Installed:
    """The chart's objects applied server-side under a unique release, namespaces and RuntimeClass."""

    def __init__(self, api: client.ApiClient, docs: list[Doc], namespaces: dict[str, str]) -> None:
        self.dyn = DynamicClient(api)
        self.docs = docs
        self.namespaces = namespaces

    def apply(self, doc: Doc, dry_run: str | None = None) -> Any:
        resource = self.dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        return self.dyn.server_side_apply(
            resource,
            body=doc,
            namespace=doc["metadata"].get("namespace"),
            field_manager=MANAGER,
            force_conflicts=True,
            dry_run=dry_run,
        )

    def pod_of(self, workload: Doc, namespace: str | None = None) -> Doc:
        template = workload["spec"]["template"]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": copy.deepcopy(template["spec"]),
            "metadata": {
                "name": unique(workload["metadata"]["name"]),
                "labels": template["metadata"]["labels"],
                "namespace": namespace or workload["metadata"]["namespace"],
            },
        }

    def refusal(self, pod: Doc) -> str:
        """'' when the API server admits the Pod (dry run), else its refusal message."""
        try:
            self.apply(pod, dry_run="All")
        except ApiException as exc:
            return f"{exc.status}: {exc.body}"
        return ""


def make_namespace(core: client.CoreV1Api, name: str, level: str) -> None:
    labels = {"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))


@pytest.fixture(params=list(VALUES), ids=list(VALUES))
def installed(request: pytest.FixtureRequest, helm: str, admin_client: client.ApiClient) -> Iterator[Installed]:
    core, node = client.CoreV1Api(admin_client), client.NodeV1Api(admin_client)
    release = unique("xidpipe")
    ns = {
        "release": f"{release}-ns",
        "agent": f"{release}-agent",
        "logs": f"{release}-team",
        "baseline": f"{release}-base",
    }
    runtime_class = f"{release}-nvidia"
    docs = render(
        helm,
        VALUES[request.param],
        f"agent.namespace={ns['agent']}",
        f"agent.runtimeClassName={runtime_class}",
        f"respond.podLogsNamespaces={{{ns['logs']}}}",
        release=release,
        namespace=ns["release"],
    )
    make_namespace(core, ns["release"], "restricted")
    make_namespace(core, ns["logs"], "restricted")
    make_namespace(core, ns["baseline"], "baseline")
    node.create_runtime_class(client.V1RuntimeClass(metadata=client.V1ObjectMeta(name=runtime_class), handler="nvidia"))
    installed = Installed(admin_client, docs, ns)
    try:
        yield installed
    finally:
        for doc in reversed(docs):
            if doc["kind"] in CLUSTER_SCOPED:
                resource = installed.dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                with contextlib.suppress(NotFoundError):  # a test that applied only part of the chart
                    installed.dyn.delete(resource, name=doc["metadata"]["name"])
        for name in (ns["release"], ns["logs"], ns["baseline"]):
            core.delete_namespace(name)
        node.delete_runtime_class(runtime_class)


def test_every_rendered_object_is_applied_and_every_pod_admitted_under_pod_security(installed: Installed) -> None:
    first = [d for d in installed.docs if d["kind"] in ("Namespace", "ServiceAccount", "ConfigMap")]
    for doc in first + [d for d in installed.docs if d not in first]:
        applied = installed.apply(doc)
        assert applied.metadata.name == doc["metadata"]["name"]
    agent_ns = next(d for d in installed.docs if d["kind"] == "Namespace")
    assert agent_ns["metadata"]["name"] == installed.namespaces["agent"]
    assert agent_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    workloads = {d["metadata"]["name"].rsplit("-", 1)[1]: d for d in installed.docs if d["kind"] in WORKLOADS}
    assert set(workloads) == {"agent", "worker", "respond", "web"}
    for name, doc in workloads.items():
        expected = installed.namespaces["agent" if name == "agent" else "release"]
        assert doc["metadata"]["namespace"] == expected
        assert installed.refusal(installed.pod_of(doc)) == "", name


def test_pod_security_refuses_what_the_chart_avoids(installed: Installed) -> None:
    """The admission checks above can fail: the agent is refused below `privileged`, and a worker
    pod that keeps its capabilities is refused under `restricted`."""
    for doc in installed.docs:
        if doc["kind"] in ("Namespace", "ServiceAccount"):
            installed.apply(doc)
    agent = next(d for d in installed.docs if d["kind"] == "DaemonSet")
    worker = next(d for d in installed.docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-worker"))
    for level, standard in (("baseline", "baseline:latest"), ("release", "restricted:latest")):
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": pod_spec(agent)["serviceAccountName"], "namespace": installed.namespaces[level]},
        }
        installed.apply(account)
        refusal = installed.refusal(installed.pod_of(agent, installed.namespaces[level]))
        assert refusal.startswith("403") and f'violates PodSecurity \\"{standard}' in refusal, refusal
        assert "hostPath" in refusal and "SYSLOG" in refusal, refusal
    pod = installed.pod_of(worker)
    del pod["spec"]["containers"][0]["securityContext"]["capabilities"]
    refusal = installed.refusal(pod)
    assert refusal.startswith("403") and "restricted:latest" in refusal and "capabilities" in refusal, refusal


def test_every_value_is_documented_in_the_chart_readme() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    keys = [k for k, v in values.items() if not isinstance(v, dict) or k == "policy"]
    keys += [
        f"{k}.{sub}"
        for k, v in values.items()
        if isinstance(v, dict) and k not in ("policy", "commonLabels")
        for sub in v
    ]
    missing = [k for k in keys if f"`{k}`" not in readme and f".{k.rsplit('.', 1)[-1]}`" not in readme]
    assert missing == []


def test_several_responders_render_only_with_the_election(helm: str) -> None:
    docs = render(helm, [])
    respond = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-respond"))
    env = {e["name"]: e for e in pod_spec(respond)["containers"][0]["env"]}
    assert respond["spec"]["replicas"] == 2 and env["XIDPIPE_RESPOND_ELECTION"]["value"] == "true"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["XIDPIPE_RESPOND_LEASE_NAME"]["value"] == "xidpipe-respond"
    cmd = [helm, "template", "xidpipe", str(CHART), "--set", "respond.election.enabled=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "needs respond.election.enabled" in proc.stderr
    single = render(helm, [], "respond.election.enabled=false", "respond.replicas=1")
    assert not [d for d in single if d["kind"] == "Role" and d["metadata"]["name"].endswith("-respond-lease")]


def test_the_responder_may_hold_its_own_lease_and_no_other(
    installed: Installed, admin_client: client.ApiClient
) -> None:
    for doc in installed.docs:
        if doc["kind"] in ("Namespace", "ServiceAccount", "Role", "RoleBinding"):
            installed.apply(doc)
    respond = next(
        d for d in installed.docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-respond")
    )
    account = pod_spec(respond)["serviceAccountName"]
    env = pod_spec(respond)["containers"][0]["env"]
    lease = next(e["value"] for e in env if e["name"] == "XIDPIPE_RESPOND_LEASE_NAME")
    ns = installed.namespaces["release"]
    authz = client.AuthorizationV1Api(admin_client)

    def allowed(verb: str, name: str | None, namespace: str = ns) -> bool:
        attrs = client.V1ResourceAttributes(group="coordination.k8s.io", resource="leases", verb=verb,
                                            name=name, namespace=namespace)
        review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{ns}:{account}", resource_attributes=attrs))
        return bool(authz.create_subject_access_review(review).status.allowed)

    assert allowed("create", None) and allowed("get", lease) and allowed("update", lease)
    assert not allowed("update", "kube-scheduler") and not allowed("get", "another-lease")
    assert not allowed("delete", lease) and not allowed("list", None)
    assert not allowed("update", lease, installed.namespaces["logs"])
