"""The Kubernetes rights the documentation gives each identity are the ones the chart's rendered
`templates/rbac.yaml` grants: none claimed that is not granted, none granted that a complete list
leaves out (docs/configuration.md's and docs/security.md's lists of the responder's, deploy/README's
table of every identity)."""

from __future__ import annotations

import re

import pytest

from tests.docs.doctext import ROOT, text_of
from tests.kube import chart_rbac

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
RESOURCES = {"nodes/status": "nodes/status", "nodes": "nodes", "pods/eviction": "pods/eviction",
             "pods/log": "pods/log", "pods": "pods", "poddisruptionbudgets": "poddisruptionbudgets",
             "PDBs": "poddisruptionbudgets", "events": "events", "namespaces": "namespaces", "leases": "leases",
             "tokenreviews": "tokenreviews", "jobs": "jobs", "rayclusters": "rayclusters",
             "resourceslices": "resourceslices", "devicetaintrules": "devicetaintrules"}
_VERBS = f"(?:{'|'.join(VERBS)})(?:/(?:{'|'.join(VERBS)}))*"
_RIGHT = re.compile(rf"(?<![\w/])(?P<res>{'|'.join(re.escape(r) for r in RESOURCES)})(?![\w/])(?P<verbs> {_VERBS})?")
_LEASE = re.compile(rf"(?P<verbs>{_VERBS}) on its one Lease")
# The chart's roles, by the identity they are bound to (the responder's ServiceAccount is xidpipe-worker).
IDENTITY = {"xidpipe-agent": "agent", "xidpipe-stream": "worker", "xidpipe-worker": "responder",
            "xidpipe-respond-lease": "responder", "xidpipe-worker-pod-logs": "responder",
            "xidpipe-respond-device-plugin": "responder", "xidpipe-respond-remediation": "responder"}

Rights = dict[str, set[str]]  # resource -> verbs (an empty set: the resource named, its verbs not)


def claimed(text: str) -> Rights:
    text = text.replace("`", "")
    out: Rights = {}
    for m in _LEASE.finditer(text):
        out.setdefault("leases", set()).update(m["verbs"].split("/"))
    for m in _RIGHT.finditer(_LEASE.sub("", text)):
        verbs = set(m["verbs"].strip().split("/")) if m["verbs"] else set()
        out.setdefault(RESOURCES[m["res"]], set()).update(verbs)
    return out


@pytest.fixture(scope="module")
def granted() -> dict[str, Rights]:
    out: dict[str, Rights] = {"agent": {}, "worker": {}, "responder": {}, "remediation": {}, "web": {}}
    for doc in chart_rbac("respond.podLogsNamespaces={team-a}", "respond.gpuWatch.devicePluginNamespace=gpu-operator"):
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        rights = out[IDENTITY[doc["metadata"]["name"]]]
        for rule in doc.get("rules", []):
            for resource in rule["resources"]:
                rights.setdefault(resource, set()).update(rule["verbs"])
    return out


def _compare(where: str, says: Rights, has: Rights, complete: bool) -> list[str]:
    wrong = [f"{where}: {r} {'/'.join(sorted(v))} is not granted" for r, v in says.items()
             if r not in has or not v <= has[r]]
    if complete:
        wrong += [f"{where}: {r} {'/'.join(sorted(has[r] - says.get(r, set())))} is granted but not said"
                  for r in has if r not in says or (says[r] and not has[r] <= says[r])]
    return wrong


def _section(doc: str, start: str, end: str) -> str:
    text = " ".join(text_of(ROOT / doc).split())
    assert start in text, f"{doc} no longer says {start!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


def test_the_responders_rights_in_configuration_md(granted: dict[str, Rights]) -> None:
    says = claimed(_section("docs/configuration.md", "The RBAC the responder needs is in", "): why each"))
    assert _compare("docs/configuration.md", says, granted["responder"], complete=True) == []


def test_the_responders_rights_in_security_md(granted: dict[str, Rights]) -> None:
    says = claimed(_section("docs/security.md", "**RBAC** (the chart's `templates/rbac.yaml`):", "Container logs"))
    says.setdefault("pods/log", set()).add("get")  # the next sentence: per namespace listed
    assert "pods/log` get in each namespace listed" in _section("docs/security.md", "Container logs", "- **Admission")
    assert _compare("docs/security.md", says, granted["responder"], complete=True) == []


def test_each_identitys_rights_in_the_deploy_readme(granted: dict[str, Rights]) -> None:
    table = text_of(ROOT / "deploy" / "README.md").split("## RBAC", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, Rights] = {}
    identity = ""
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        identity = cells[0].split(" ", 1)[0] or identity
        rights = claimed(cells[1]) if not cells[1].startswith("none") else {}
        for resource, verbs in rights.items():
            rows.setdefault(identity, {}).setdefault(resource, set()).update(verbs)
        rows.setdefault(identity, {})
    assert set(rows) == set(granted)
    wrong = [w for who in rows for w in _compare(f"deploy/README.md {who}", rows[who], granted[who], complete=True)]
    assert wrong == []


def test_the_checker_finds_what_is_wrong(granted: dict[str, Rights]) -> None:
    missing_watch = claimed("nodes get/list/patch, nodes/status patch, pods get/list, pods/eviction create, "
                            "events create/patch")
    assert "nodes watch is granted but not said" in " ".join(
        _compare("x", missing_watch, granted["responder"], complete=True))
    assert _compare("x", claimed("nodes delete"), granted["responder"], complete=False)
    assert claimed("leases create; get/update on its one Lease") == {"leases": {"create", "get", "update"}}
