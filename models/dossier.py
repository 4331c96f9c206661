"""The fault dossier: everything a hardware engineer or the vendor will ask about one incident.

Rendered from plain values, deterministically (same input, same bytes), as Markdown (the ticket
body) and as JSON. Evidence is size-capped and redacted at render time, whatever its source.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from models.redact import redact

DOSSIER_VERSION = 1
EVIDENCE_CAP_BYTES = 16 * 1024  # per item in the Markdown body; the full (redacted) file is attached


class CodeInfo(BaseModel):
    code: str  # "Xid 79", "SXid 12028", "fallen off the bus"
    count: int
    mnemonic: str | None = None
    description: str | None = None
    immediate_action: str | None = None
    investigatory_action: str | None = None


class DossierGpu(BaseModel):
    """The incident's GPU as the dossier names it."""

    model: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci: str | None = None
    numa_node: int | None = None


class Attribution(BaseModel):
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    owner: str | None = None  # e.g. "Job/llm-pretrain-7" or a team label
    process: str | None = None
    pid: int | None = None


class EvidenceItem(BaseModel):
    name: str  # "nvidia-smi -q", "kernel log window", "lspci -vvv", "pod events" ...
    source: Literal["node", "cluster"]
    captured_at: datetime | None = None
    status: str = "ok"  # ok, timeout, absent, error
    content: str = ""


class HistoryItem(BaseModel):
    incident_id: str
    node: str
    gpu_uuid: str | None = None
    family: str
    category: str
    first_seen: datetime
    status: str


class ActionItem(BaseModel):
    at: datetime
    action: str  # cordon, taint, condition, drain, release, ticket, notify
    outcome: str  # done, dry-run, refused, failed
    actor: str = "xidpipe"
    detail: str = ""


class Dossier(BaseModel):
    incident_id: str
    fingerprint: str
    cluster: str | None = None
    node: str
    family: str
    category: str
    reason: str
    status: str
    count: int
    first_seen: datetime
    last_seen: datetime
    codes: list[CodeInfo]
    catalog_version: str
    driver_version: str | None = None
    gpu: DossierGpu = Field(default_factory=DossierGpu)
    attribution: Attribution = Field(default_factory=Attribution)
    evidence: list[EvidenceItem] = Field(default_factory=list)
    gpu_history: list[HistoryItem] = Field(default_factory=list)  # this card's incidents, by serial
    node_history: list[HistoryItem] = Field(default_factory=list)
    actions: list[ActionItem] = Field(default_factory=list)
    # A fleet incident (component `fleet`, `node` is the cluster) names no GPU: the nodes it spans
    # and their own incidents instead.
    component: str = "gpu"
    nodes: list[str] = Field(default_factory=list)
    node_incidents: list[HistoryItem] = Field(default_factory=list)


def _v(value: object) -> str:
    if value is None or value == "":
        return "unknown"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value).replace("|", "\\|")


def _cap(text: str, cap: int = EVIDENCE_CAP_BYTES) -> tuple[str, bool]:
    raw = text.encode("utf-8")
    if len(raw) <= cap:
        return text, False
    return raw[:cap].decode("utf-8", "ignore"), True


def title(d: Dossier) -> str:
    codes = ", ".join(c.code for c in d.codes[:3])
    if d.component == "fleet":
        return f"[xidpipe] fleet: {d.family} ({codes or 'no codes'}) on {len(d.nodes)} nodes of cluster {d.node}"
    if d.component == "nvswitch":
        return f"[xidpipe] {d.category}: {codes} on {d.node} NVSwitch {d.gpu.pci or 'unknown'}"
    if d.component == "node":
        return f"[xidpipe] {d.category}: {codes} on {d.node} (the node's driver)"
    gpu = d.gpu.serial or d.gpu.uuid or d.gpu.pci or "node"
    return f"[xidpipe] {d.category}: {codes} on {d.node} GPU {gpu}"


def _summary_place(d: Dossier) -> list[str]:
    """The summary's rows that say where: the node and GPU, or a fleet incident's cluster and nodes."""
    if d.component == "fleet":
        return [f"| Cluster | {_v(d.node)} |", f"| Nodes | {len(d.nodes)}: {_v(', '.join(d.nodes))} |"]
    if d.component == "nvswitch":
        return [f"| Node | {_v(d.node)}{f' (cluster {d.cluster})' if d.cluster else ''} |",
                f"| NVSwitch | PCI address {_v(d.gpu.pci)} |"]
    return [f"| Node | {_v(d.node)}{f' (cluster {d.cluster})' if d.cluster else ''} |",
            f"| GPU | {_v(d.gpu.model)}, UUID {_v(d.gpu.uuid)}, serial {_v(d.gpu.serial)} |",
            f"| PCI address | {_v(d.gpu.pci)}, NUMA node {_v(d.gpu.numa_node)} |"]


def render_markdown(d: Dossier) -> str:
    """The ticket body. Every value passes through redaction; evidence is capped per item."""
    out: list[str] = [f"# {title(d)}", ""]
    out += [
        "## Summary",
        "",
        "| | |",
        "|---|---|",
        f"| Incident | {_v(d.incident_id)} (`{d.fingerprint}`), {d.status} |",
        *_summary_place(d),
        f"| Fault family | {d.family} |",
        f"| Occurrences | {d.count}, first {_v(d.first_seen)}, last {_v(d.last_seen)} |",
        f"| Classification | **{d.category}**: {_v(d.reason)} |",
        f"| Catalog / driver | {d.catalog_version} / {_v(d.driver_version)} |",
        "",
        "## Codes and NVIDIA's guidance",
        "",
        "| Code | Count | Mnemonic | Description | Immediate action | Investigatory action |",
        "|---|---|---|---|---|---|",
    ]
    for c in d.codes:
        out.append(f"| {c.code} | {c.count} | {_v(c.mnemonic)} | {_v(c.description)} | {_v(c.immediate_action)} "
                   f"| {_v(c.investigatory_action)} |")
    a = d.attribution
    out += [
        "",
        "## Attribution at the time of the fault",
        "",
        f"- Pod: {_v(a.pod)} in namespace {_v(a.namespace)}, container {_v(a.container)}",
        f"- Owner: {_v(a.owner)}",
        f"- Process: {_v(a.process)} (pid {_v(a.pid)})",
        "",
        "## Actions taken",
        "",
    ]
    if d.actions:
        out += ["| Time | Action | Outcome | By | Detail |", "|---|---|---|---|---|"]
        out += [f"| {_v(x.at)} | {x.action} | {x.outcome} | {_v(x.actor)} | {_v(x.detail)} |"
                for x in sorted(d.actions, key=lambda x: (x.at, x.action))]
    else:
        out.append("None yet.")
    out += ["", "## History", ""]
    if d.component == "fleet":
        out += _history("Incidents of its nodes", d.node_incidents)
        out += _history(f"Cluster {d.node}: earlier fleet incidents", d.node_history)
    else:
        out += _history("This card (by serial)", d.gpu_history)
        out += _history(f"Node {d.node}", d.node_history)
    out += ["## Evidence", ""]
    if not d.evidence:
        out += ["No evidence captured yet.", ""]
    for e in sorted(d.evidence, key=lambda e: (e.source, e.name)):
        body, cut = _cap(e.content)
        when = f", captured {e.captured_at.isoformat()}" if e.captured_at else ""
        out += [f"### {e.name} ({e.source}{when}, {e.status})", "", "```", body.rstrip("\n"), "```"]
        if cut:
            out.append(f"_Cut at {EVIDENCE_CAP_BYTES} bytes; the full capture is attached._")
        out.append("")
    return redact("\n".join(out).rstrip("\n") + "\n")


def _history(heading: str, items: list[HistoryItem]) -> list[str]:
    out = [f"### {heading}", ""]
    if not items:
        return [*out, "No earlier incidents.", ""]
    out += ["| First seen | Incident | Node | GPU UUID | Family | Classification | Status |",
            "|---|---|---|---|---|---|---|"]
    out += [f"| {_v(h.first_seen)} | {h.incident_id} | {h.node} | {_v(h.gpu_uuid)} | {h.family} | {h.category} "
            f"| {h.status} |" for h in sorted(items, key=lambda h: (h.first_seen, h.incident_id))]
    return [*out, ""]


def render_json(d: Dossier) -> dict[str, Any]:
    """The machine-readable dossier: the same facts, evidence capped and redacted."""
    data = d.model_dump(mode="json")
    data["dossier_version"] = DOSSIER_VERSION
    data["title"] = redact(title(d))
    data["reason"] = redact(d.reason)
    for item in data["evidence"]:
        body, cut = _cap(item["content"])
        item["content"] = redact(body)
        item["truncated"] = cut
    return data


def evidence_files(d: Dossier) -> dict[str, bytes]:
    """The raw evidence as attachments (redacted, uncapped): file name → bytes."""
    files: dict[str, bytes] = {}
    for e in d.evidence:
        stem = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in e.name).strip("-") or "evidence"
        name = f"{e.source}-{stem}.txt"
        n = 2
        while name in files:
            name = f"{e.source}-{stem}-{n}.txt"
            n += 1
        files[name] = redact(e.content).encode("utf-8")
    return files
