"""The fault dossier: everything a hardware engineer or the vendor will ask about one incident.

Written once as a document (`document`), in the order an on-call engineer reads it: what to do
now and the link to the incident's page, the summary, the codes with NVIDIA's guidance and the
driver's own words, the workload, the actions taken, the history, the evidence. Rendered where it
lands: Markdown (the dossier file, the outbox), Jira wiki markup (Server and Data Center, API v2)
and ADF (Cloud, API v3); and as JSON. Deterministic (same input, same bytes). Every text passes
through redaction before it is escaped for its format; evidence is size-capped per item. Facts
nobody knows are left out, never printed as "unknown".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from models.redact import redact
from models.render import adf, jira_wiki, markdown
from models.render.doc import Block, Code, Heading, Inline, ItemList, Paragraph, Table, line, link, mono, strong
from models.runbook import WhatToDo, what_to_do

DOSSIER_VERSION = 1
EVIDENCE_CAP_BYTES = 16 * 1024  # per item in the body; the full (redacted) file is attached
JiraFlavor = Literal["server", "cloud"]
# Tools that watch GPUs, never the workload: a fault they report names the GPU, not the job.
MONITORING_TOOLS = frozenset({"nvidia-smi", "nv-hostengine", "nvidia-persistenced", "dcgmi", "dcgm-exporter"})


def is_monitoring_tool(process: str | None) -> bool:
    """True for nvidia-smi, DCGM (dcgm*, nv-hostengine) and the like, as a kernel line names them."""
    name = (process or "").strip().rsplit("/", 1)[-1].lower()
    return name in MONITORING_TOOLS or name.startswith("dcgm")


class CodeInfo(BaseModel):
    code: str  # "Xid 79", "SXid 12028", "fallen off the bus"
    count: int
    mnemonic: str | None = None
    description: str | None = None
    immediate_action: str | None = None
    investigatory_action: str | None = None
    message: str | None = None  # the driver's own line (its first occurrence), e.g. a request for a bug report


class DossierGpu(BaseModel):
    """The incident's GPU as the dossier names it."""

    model: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci: str | None = None
    numa_node: int | None = None
    quarantine_rule: str | None = None  # the DeviceTaintRule that quarantines it now, if one does
    quarantine: str | None = None  # what holds it: effect, device, since, incident


class Attribution(BaseModel):
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    owner: str | None = None  # the owning team, from the workload's labels or annotations
    workload: str | None = None  # the workload the classifier names (namespace/owner/container)
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
    incident_url: str | None = None  # the incident's page (`xidpipe serve`), where one is configured


def _ts(value: datetime | None) -> str:
    return value.isoformat() if value else ""


def _cap(text: str, cap: int = EVIDENCE_CAP_BYTES) -> tuple[str, bool]:
    raw = text.encode("utf-8")
    if len(raw) <= cap:
        return text, False
    return raw[:cap].decode("utf-8", "ignore"), True


def _joined(*parts: object, sep: str = ", ") -> str:
    return sep.join(str(p) for p in parts if p not in (None, ""))


def gpu_name(d: Dossier) -> str | None:
    """The GPU as people look for it: its serial, else its UUID, else its PCI address."""
    return d.gpu.serial or d.gpu.uuid or d.gpu.pci


def title(d: Dossier) -> str:
    codes = ", ".join(c.code for c in d.codes[:3])
    if d.component == "fleet":
        return f"[xidpipe] fleet: {d.family} ({codes or 'no codes'}) on {len(d.nodes)} nodes of cluster {d.node}"
    if d.component == "nvswitch":
        return f"[xidpipe] {d.category}: {codes} on {d.node} NVSwitch{f' {d.gpu.pci}' if d.gpu.pci else ''}"
    if d.component == "node":
        return f"[xidpipe] {d.category}: {codes} on {d.node} (the node's driver)"
    if d.component == "workload" and d.attribution.workload:
        return f"[xidpipe] {d.category}: {codes} from {d.attribution.workload} on {d.node}"
    gpu = gpu_name(d)
    return f"[xidpipe] {d.category}: {codes} on {d.node}{f' GPU {gpu}' if gpu else ''}"


def owner_phrase(d: Dossier) -> str:
    a = d.attribution
    if a.owner:
        return f"the owners of the job ({a.owner})"
    if a.workload:
        return f"the owners of {a.workload}"
    return f"the owners of the job in namespace {a.namespace}" if a.namespace else "the job's owners"


def next_steps(d: Dossier) -> WhatToDo:
    """What to do now, from the incident's class and its codes' catalog actions."""
    facts = {"node": d.node, "gpu": gpu_name(d) or "the GPU", "pci": d.gpu.pci or "<PCI address>",
             "owner": owner_phrase(d), "namespace": d.attribution.namespace or "its namespace"}
    return what_to_do(component=d.component, category=d.category, family=d.family,
                      actions=[c.immediate_action for c in d.codes if c.immediate_action],
                      investigatory=[c.investigatory_action for c in d.codes if c.investigatory_action],
                      messages=[c.message for c in d.codes if c.message], facts=facts)


def workload_lines(d: Dossier) -> list[str]:
    """The workload at the time of the fault, each line a known fact (none when nothing is known)."""
    a = d.attribution
    out = []
    if a.owner:
        out.append(f"Owner: {a.owner}")
    if a.workload:
        out.append(f"Workload: {a.workload}")
    if a.pod:
        where = _joined(f"in namespace {a.namespace}" if a.namespace else None,
                        f"container {a.container}" if a.container else None)
        out.append(f"Pod: {a.pod}{f' ({where})' if where else ''}")
    if a.process and not is_monitoring_tool(a.process):
        out.append(f"Process: {a.process}{f' (pid {a.pid})' if a.pid is not None else ''}")
    return out


def _place(d: Dossier) -> list[tuple[str, str]]:
    """The summary's rows that say where: the node and GPU, or a fleet incident's cluster and nodes."""
    if d.component == "fleet":
        return [("Cluster", d.node), ("Nodes", f"{len(d.nodes)}: {', '.join(d.nodes)}" if d.nodes else "")]
    node = d.node + (f" (cluster {d.cluster})" if d.cluster else "")
    if d.component == "nvswitch":
        return [("Node", node), ("NVSwitch", f"PCI address {d.gpu.pci}" if d.gpu.pci else "")]
    g = d.gpu
    gpu = _joined(g.model, f"UUID {g.uuid}" if g.uuid else None, f"serial {g.serial}" if g.serial else None)
    pci = _joined(g.pci, f"NUMA node {g.numa_node}" if g.numa_node is not None else None)
    return [("Node", node), ("GPU", gpu), ("PCI address", pci), ("Quarantine", g.quarantine or "")]


def _summary(d: Dossier) -> Table:
    incident = line(d.incident_id, " (", mono(d.fingerprint), f"), {d.status}")
    rows: list[tuple[Inline, ...]] = [(line("Incident"), incident)]
    rows += [(line(k), line(v)) for k, v in _place(d) if v]
    rows += [
        (line("Fault family"), line(d.family)),
        (line("Occurrences"), line(f"{d.count}, first {_ts(d.first_seen)}, last {_ts(d.last_seen)}")),
        (line("Classification"), line(strong(d.category), f": {d.reason}" if d.reason else "")),
        (line("Catalog / driver"), line(_joined(d.catalog_version, d.driver_version, sep=" / "))),
    ]
    return Table((), tuple(rows))


def _codes(d: Dossier) -> Table:
    rows = tuple((line(c.code), line(str(c.count)), line(c.mnemonic or ""), line(c.description or ""),
                  line(_joined(c.immediate_action, c.investigatory_action, sep=" / ")), line(c.message or ""))
                 for c in d.codes)
    return Table(("Code", "Count", "Mnemonic", "Description", "NVIDIA's action (immediate / investigatory)",
                  "Driver's message"), rows)


def _actions(d: Dossier) -> list[Block]:
    if not d.actions:
        return [Paragraph(line("None yet."))]
    rows = tuple((line(_ts(x.at)), line(x.action), line(x.outcome), line(x.actor), line(x.detail))
                 for x in sorted(d.actions, key=lambda x: (x.at, x.action)))
    return [Table(("Time", "Action", "Outcome", "By", "Detail"), rows)]


def _history(heading: str, items: list[HistoryItem]) -> list[Block]:
    out: list[Block] = [Heading(3, heading)]
    if not items:
        return [*out, Paragraph(line("No earlier incidents."))]
    rows = tuple((line(_ts(h.first_seen)), line(h.incident_id), line(h.node), line(h.gpu_uuid or ""), line(h.family),
                  line(h.category), line(h.status))
                 for h in sorted(items, key=lambda h: (h.first_seen, h.incident_id)))
    return [*out, Table(("First seen", "Incident", "Node", "GPU UUID", "Family", "Classification", "Status"), rows)]


def _evidence(d: Dossier) -> list[Block]:
    if not d.evidence:
        return [Paragraph(line("No evidence captured yet."))]
    out: list[Block] = []
    for e in sorted(d.evidence, key=lambda e: (e.source, e.name)):
        body, cut = _cap(e.content)
        when = f", captured {e.captured_at.isoformat()}" if e.captured_at else ""
        out += [Heading(3, f"{e.name} ({e.source}{when}, {e.status})"),
                Code(body.rstrip("\n") or "(no output)")]
        if cut:
            out.append(Paragraph(line(f"Cut at {EVIDENCE_CAP_BYTES} bytes; the full capture is attached.")))
    return out


def step_spans(step: str) -> Inline:
    """A runbook step: `backticked` parts are commands, shown as code."""
    parts = step.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: plain text
        return line(step)
    return line(*(mono(p) if i % 2 else p for i, p in enumerate(parts) if p))


def what_to_do_blocks(d: Dossier) -> list[Block]:
    """The top of every ticket: the steps, and the links to the incident's page."""
    out: list[Block] = [Heading(2, "What to do now"), ItemList(tuple(step_spans(s) for s in next_steps(d).steps), True)]
    if d.incident_url:
        out.append(Paragraph(line("Incident page: ", link(d.incident_url, d.incident_url))))
    return out


def document(d: Dossier, *, title_heading: bool = True) -> list[Block]:
    """The dossier as a document, every text redacted (the renderers escape it for their format)."""
    out: list[Block] = [Heading(1, title(d))] if title_heading else []
    out += [*what_to_do_blocks(d), Heading(2, "Summary"), _summary(d), Heading(2, "Codes and NVIDIA's guidance"),
            _codes(d), Heading(2, "Workload at the time of the fault")]
    who = workload_lines(d)
    out.append(ItemList(tuple(line(x) for x in who)) if who else Paragraph(line("No workload is known.")))
    out += [Heading(2, "Actions taken"), *_actions(d), Heading(2, "History")]
    if d.component == "fleet":
        out += _history("Incidents of its nodes", d.node_incidents)
        out += _history(f"Cluster {d.node}: earlier fleet incidents", d.node_history)
    else:
        out += _history("This card (by serial)", d.gpu_history)
        out += _history(f"Node {d.node}", d.node_history)
    out += [Heading(2, "Evidence"), *_evidence(d)]
    return redact_blocks(out)


def redact_blocks(blocks: Iterable[Block]) -> list[Block]:
    def spans(items: Inline) -> Inline:
        return tuple(replace(s, text=redact(s.text)) for s in items)

    out: list[Block] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(replace(b, text=redact(b.text)))
        elif isinstance(b, Paragraph):
            out.append(Paragraph(spans(b.spans)))
        elif isinstance(b, ItemList):
            out.append(replace(b, items=tuple(spans(i) for i in b.items)))
        elif isinstance(b, Code):
            out.append(Code(redact(b.text)))
        else:
            out.append(replace(b, header=tuple(redact(h) for h in b.header),
                               rows=tuple(tuple(spans(c) for c in row) for row in b.rows)))
    return out


def render_markdown(d: Dossier) -> str:
    """The dossier file and the outbox ticket: Markdown, with the title as its first heading."""
    return markdown.render(document(d))


def render_jira_wiki(d: Dossier) -> str:
    """The ticket body for Jira Server and Data Center (REST API v2): wiki markup."""
    return jira_wiki.render(document(d, title_heading=False))


def render_adf(d: Dossier) -> dict[str, Any]:
    """The ticket body for Jira Cloud (REST API v3): an ADF document."""
    return adf.render(document(d, title_heading=False))


def ticket_body(d: Dossier, flavor: JiraFlavor) -> str | dict[str, Any]:
    return render_adf(d) if flavor == "cloud" else render_jira_wiki(d)


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
    for code in data["codes"]:
        code["message"] = redact(code["message"]) if code.get("message") else code.get("message")
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
