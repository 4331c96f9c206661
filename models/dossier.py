"""The fault dossier: everything a hardware engineer or the vendor will ask about one incident.

Written once as a document (`document`), in the order an on-call engineer reads it: what to do
now and the link to the incident's page, the summary (with the cordon decision and NVIDIA's action
for the decisive code, from the incident's account: `models.account`), the codes with NVIDIA's
guidance and the driver's own words, the workload, the actions taken, the history, the evidence
(the kernel log as the fault's own lines, the whole capture attached). Rendered where it
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

from models.account import (
    Account,
    ActionItem,
    AffectedWorkload,
    EvidenceRef,
    action_text,
    build_account,
    decision_text,
)
from models.decisive import CodeFacts, Decisive, decisive
from models.evidence_lines import select
from models.redact import redact
from models.render import adf, jira_wiki, markdown
from models.render.doc import Block, Code, Heading, Inline, ItemList, Paragraph, Table, line, link, mono, strong
from models.runbook import WhatToDo, load_runbook, what_to_do
from models.severity import Severity, severity
from models.vocabulary import ComponentKind

# 2: actions carry the cordon decision's outcome, reason and dry-run flag apart (their `outcome` is the
# action record's, never "dry-run"); the GPU carries its index and minor number; JSON adds the account.
DOSSIER_VERSION = 2
TITLE_CODES = 6  # codes named in a title; the rest are counted
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

    index: int | None = None  # the NVML index: what `nvidia-smi -i` and `dcgmi -i` take (the DCGM GPU id)
    minor_number: int | None = None  # its device file, /dev/nvidia<minor>
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
    # Every workload the incident's faults hit (one per pod, in the order they faulted; the builder's, from
    # the fault records): whom `models.affected_notice` tells. `attribution` is the latest of them.
    affected: list[Attribution] = Field(default_factory=list)
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
    """The GPU's identity as people look it up: its serial, else its UUID, else its PCI address."""
    return d.gpu.serial or d.gpu.uuid or d.gpu.pci


def gpu_label(d: Dossier) -> str | None:
    """The GPU as a sentence names it: "GPU 3 (serial 1654923011263)", never a bare serial that reads
    like an index; None when nothing names it."""
    g = d.gpu
    if g.index is not None:
        ident = f"serial {g.serial}" if g.serial else g.uuid or (f"PCI {g.pci}" if g.pci else None)
        return f"GPU {g.index}" + (f" ({ident})" if ident else "")
    if g.serial:
        return f"GPU with serial {g.serial}"
    return f"GPU {g.uuid}" if g.uuid else (f"GPU at {g.pci}" if g.pci else None)


def smi_id(d: Dossier) -> str | None:
    """What `nvidia-smi -i` takes for the GPU: its UUID (stable across reboots), else its PCI address,
    else its index."""
    g = d.gpu
    return g.uuid or g.pci or (str(g.index) if g.index is not None else None)


def decisive_of(d: Dossier) -> Decisive:
    """The incident's decisive code and NVIDIA's action for it (`models.decisive`)."""
    return decisive([CodeFacts(c.code, c.immediate_action, c.message) for c in d.codes], load_runbook().order)


def account_of(d: Dossier) -> Account:
    """The incident's account (`models.account`): what every sink says about it."""
    hit = d.affected or [d.attribution]
    affected = [AffectedWorkload(workload=a.workload, namespace=a.namespace, pod=a.pod, owner=a.owner)
                for a in hit if a.workload or a.pod]
    evidence = [EvidenceRef(name=e.name, source=e.source, status=e.status, captured_at=e.captured_at)
                for e in sorted(d.evidence, key=lambda e: (e.source, e.name))]
    return build_account(node=d.node, component=d.component, actions=d.actions, decisive=decisive_of(d),
                         evidence=evidence, affected=affected)


def title_codes(d: Dossier, limit: int | None = TITLE_CODES) -> list[str]:
    """The incident's codes as titles and messages list them: the decisive one first, then the others
    in order; past `limit`, how many more."""
    codes = decisive_of(d).codes_first([c.code for c in d.codes])
    if limit is None or len(codes) <= limit:
        return codes
    return [*codes[:limit], f"{len(codes) - limit} more"]


def severity_of(d: Dossier) -> Severity:
    """The incident's severity: the one table's (`models.severity`), from its family and decision."""
    return severity(d.family, account_of(d).decision, d.component)


def title(d: Dossier) -> str:
    codes = ", ".join(title_codes(d))
    if d.component == ComponentKind.FLEET:
        return f"[xidpipe] fleet: {d.family} ({codes or 'no codes'}) on {len(d.nodes)} nodes of cluster {d.node}"
    if d.component == ComponentKind.NVSWITCH:
        return f"[xidpipe] {d.category}: {codes} on {d.node} NVSwitch{f' {d.gpu.pci}' if d.gpu.pci else ''}"
    if d.component == ComponentKind.NODE:
        return f"[xidpipe] {d.category}: {codes} on {d.node} (the node's driver)"
    if d.component == ComponentKind.WORKLOAD and d.attribution.workload:
        return f"[xidpipe] {d.category}: {codes} from {d.attribution.workload} on {d.node}"
    gpu = gpu_label(d)
    return f"[xidpipe] {d.category}: {codes} on {d.node}{f' {gpu}' if gpu else ''}"


def owner_phrase(d: Dossier) -> str:
    a = d.attribution
    if a.owner:
        return f"the owners of the job ({a.owner})"
    if a.workload:
        return f"the owners of {a.workload}"
    return f"the owners of the job in namespace {a.namespace}" if a.namespace else "the job's owners"


def _evidence_phrase(d: Dossier) -> str:
    names = [e.name + ("" if e.status == "ok" else f" ({e.status})") for e in account_of(d).evidence]
    return ", ".join(names)


def facts(d: Dossier) -> dict[str, str]:
    """The runbook's placeholders for this incident (`models/catalog/runbook.yaml`)."""
    a = account_of(d)
    gpu = gpu_label(d) or "the GPU"
    return {"node": d.node, "gpu": gpu, "pci": d.gpu.pci or "<PCI address>", "smi_id": smi_id(d) or "<GPU>",
            "dcgm_id": str(d.gpu.index) if d.gpu.index is not None else "<GPU id>",
            "serial": d.gpu.serial or "on the card's label", "owner": owner_phrase(d),
            "namespace": d.attribution.namespace or "its namespace", "evidence": _evidence_phrase(d),
            "decision_reason": a.reason, "recovery": a.recovery_action or ""}


def next_steps(d: Dossier) -> WhatToDo:
    """What to do now: the runbook for the incident's class or decisive code, phase by phase, its
    isolate step saying what the cordon decision did."""
    acct = account_of(d)
    return what_to_do(component=d.component, category=d.category, family=d.family, decisive=decisive_of(d),
                      decision=acct.decision, drained=acct.drained,
                      investigatory=[c.investigatory_action for c in d.codes if c.investigatory_action],
                      messages=[c.message for c in d.codes if c.message],
                      evidence=any(e.source == "node" for e in d.evidence), codes=[c.code for c in d.codes],
                      facts=facts(d))


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
    gpu = _joined(f"GPU {g.index}" if g.index is not None else None, g.model, f"UUID {g.uuid}" if g.uuid else None,
                  f"serial {g.serial}" if g.serial else None,
                  f"/dev/nvidia{g.minor_number}" if g.minor_number is not None else None)
    pci = _joined(g.pci, f"NUMA node {g.numa_node}" if g.numa_node is not None else None)
    return [("Node", node), ("GPU", gpu), ("PCI address", pci), ("Quarantine", g.quarantine or "")]


def _summary(d: Dossier) -> Table:
    incident = line(d.incident_id, " (", mono(d.fingerprint), f"), {d.status}")
    acct = account_of(d)
    rows: list[tuple[Inline, ...]] = [(line("Incident"), incident), (line("Decision"), line(decision_text(acct)))]
    if action_text(acct):
        rows.append((line("NVIDIA's action"), line(action_text(acct))))
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
    rows = tuple((line(_ts(x.at)), line(x.action), line(x.decision_outcome() or ""), line(outcome_text(x)),
                  line(x.actor), line(x.reason or x.detail))
                 for x in sorted(d.actions, key=lambda x: (x.at, x.action)))
    return [Table(("Time", "Action", "Decision", "Outcome", "By", "Reason"), rows)]


def outcome_text(x: ActionItem) -> str:
    """What a recorded action came to, as shown: the action record's own outcome ("dry run" only for a
    cordon decided and not written, never beside a decision that asked for none)."""
    return x.outcome.replace("_", " ").replace("-", " ")


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
        when = f", captured {e.captured_at.isoformat()}" if e.captured_at else ""
        out.append(Heading(3, f"{e.name} ({e.source}{when}, {e.status})"))
        picked = kernel_lines(d, e)
        if picked is not None:
            out += [Paragraph(line(picked[0])), Code("\n".join(picked[1]))]
            continue
        body, cut = _cap(e.content)
        out.append(Code(body.rstrip("\n") or "(no output)"))
        if cut:
            out.append(Paragraph(line(f"Cut at {EVIDENCE_CAP_BYTES} bytes; the full capture is attached.")))
    return out


def kernel_lines(d: Dossier, e: EvidenceItem) -> tuple[str, list[str]] | None:
    """A kernel-log capture as the fault's own lines and the GPU-relevant lines around them
    (`models.evidence_lines`), with what was left out; None for any other item, or when no line of
    the capture names the device (then it is shown as captured)."""
    if e.source != "node" or not e.name.startswith("kernel"):
        return None
    sel = select(e.content, pci=d.gpu.pci, uuid=d.gpu.uuid, serial=d.gpu.serial)
    if not sel.kept:
        return None
    shown, _ = _cap("\n".join(sel.lines))
    times = " (times in UTC)" if sel.timed else ""
    return (f"The fault's own lines and the GPU's lines around them{times}: {sel.kept} of the {sel.total} lines "
            f"captured. The whole capture is attached ({evidence_name(e)})."), shown.splitlines()


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
    """The machine-readable dossier: the same facts, evidence capped and redacted; with the account
    (`account`), what to do now (`what_to_do`), the severity, the workload as the ticket names it, and
    for a kernel-log capture the fault's own lines (`fault_lines`, with `fault_lines_note`)."""
    data = d.model_dump(mode="json")
    data["dossier_version"] = DOSSIER_VERSION
    data["title"] = redact(title(d))
    data["reason"] = redact(d.reason)
    data["account"] = account_json(d)
    data["severity"] = severity_of(d).value
    data["what_to_do"] = [redact(s) for s in next_steps(d).steps]
    data["workload"] = [redact(s) for s in workload_lines(d)]
    data["gpu"]["label"] = gpu_label(d)
    for item, e in zip(data["evidence"], d.evidence, strict=True):
        body, cut = _cap(item["content"])
        item["content"] = redact(body)
        item["truncated"] = cut
        picked = kernel_lines(d, e)
        if picked is not None:
            item["fault_lines_note"], item["fault_lines"] = picked[0], [redact(x) for x in picked[1]]
    for code in data["codes"]:
        code["message"] = redact(code["message"]) if code.get("message") else code.get("message")
    return data


def account_json(d: Dossier) -> dict[str, Any]:
    """The incident's account as JSON (the API's and the page's), every text redacted, with its
    sentences as the ticket and the message say them."""
    acct = account_of(d)
    data = acct.model_dump(mode="json")
    data["reason"] = redact(acct.reason)
    data["decision_text"] = redact(decision_text(acct))
    data["action_text"] = action_text(acct)
    return data


def evidence_name(e: EvidenceItem) -> str:
    """The attachment name of an evidence item (the first of its name; `evidence_files` numbers the rest)."""
    stem = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in e.name).strip("-") or "evidence"
    return f"{e.source}-{stem}.txt"


def evidence_files(d: Dossier) -> dict[str, bytes]:
    """The raw evidence as attachments (redacted, uncapped): file name → bytes."""
    files: dict[str, bytes] = {}
    for e in d.evidence:
        name = first = evidence_name(e)
        n = 2
        while name in files:
            name = f"{first.removesuffix('.txt')}-{n}.txt"
            n += 1
        files[name] = redact(e.content).encode("utf-8")
    return files
