"""One account of the incident in every sink: a table over every decision the action record can hold
and every sink (Jira wiki markup and ADF, the outbox's Markdown ticket, the chat message as Slack and
the outbox get it, the incident page, the API's JSON). Each must say the decision its record says, and
no other: never "dry run" beside a decision that is not one, never "cordoned" of a node nobody
cordoned, never a `cordon_requested` the record does not back, and NVIDIA's action for the decisive
code, never its first code's."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from history.tables import Incident
from models.account import CORDON_ACTIONS, REQUESTED, ActionItem, Decision, headline
from models.chat_message import GroupMessage
from models.dossier import CodeInfo, Dossier, DossierGpu, EvidenceItem, account_of, render_json
from models.ticket_policy import TicketFields
from respond.sinks.content import group_message
from respond.sinks.model import IncidentNotice
from respond.sinks.outbox import OutboxChat, OutboxTracker
from respond.sinks.ports import TicketBody
from xidpipe.web import data
from xidpipe.web.pages import ENV

T0 = datetime(2026, 11, 25, 12, 52, 8, tzinfo=UTC)
WHY = "rule dbe-now: cordon at once for Xid 48 (memory)"


def act(action: str, outcome: str, decision: str | None, *, dry_run: bool = False, reason: str = WHY,
        after_s: int = 1) -> ActionItem:
    """A row of the action record, as the executor writes it (respond/cordon/executor.py)."""
    return ActionItem(at=T0 + timedelta(seconds=after_s), action=action, outcome=outcome, decision=decision,
                      reason=reason, dry_run=dry_run, detail=f"{decision or ''}: {reason}".strip(": "))


@dataclass(frozen=True)
class Case:
    name: str
    records: tuple[ActionItem, ...]
    decision: Decision
    component: str = "gpu"


CASES = [
    Case("nothing decided yet", (), Decision.PENDING),
    Case("a workload's incident", (), Decision.NOT_OFFERED, "workload"),
    Case("cordoned", (act("cordon", "done", "cordon"),), Decision.CORDONED),
    Case("cordoned, then repeated", (act("cordon", "done", "cordon"), act("repeat", "done", "repeat", after_s=5)),
         Decision.CORDONED),
    Case("no cluster: dry run", (act("cordon", "dry_run", "cordon", dry_run=True),), Decision.DRY_RUN),
    Case("policy dry run", (act("cordon", "dry_run", "cordon", dry_run=True),), Decision.DRY_RUN),
    Case("not needed, in dry run", (act("cordon", "skipped", "not_needed", dry_run=True,
                                        reason="no rule matches nvswitch (nvswitch, interconnect): default never"),),
         Decision.NOT_NEEDED),
    Case("not needed", (act("cordon", "skipped", "not_needed", reason="rule contained: 1 occurrence(s) within "
                                                                        "3600 s, below the threshold of 2"),),
         Decision.NOT_NEEDED),
    Case("redelivered", (act("cordon", "done", "cordon"), act("cordon", "noop", "already_cordoned", after_s=9,
                                                              reason="node gpu-node-02 is already cordoned by "
                                                                     "xidpipe for this incident")),
         Decision.CORDONED),
    Case("someone else's cordon", (act("cordon", "skipped", "foreign_cordon",
                                       reason="node gpu-node-02 was cordoned by someone else"),), Decision.REFUSED),
    Case("opted out", (act("cordon", "skipped", "opted_out", reason="node gpu-node-02 is labelled "
                                                                    "xidpipe.io/opt-out=true"),), Decision.REFUSED),
    Case("out of scope", (act("cordon", "skipped", "out_of_scope", reason="node gpu-node-02 is in pool 'cpu'"),),
         Decision.REFUSED),
    Case("no such node", (act("cordon", "failed", "node_missing", reason="node gpu-node-02 does not exist"),),
         Decision.REFUSED),
    Case("breaker open", (act("cordon", "skipped", "breaker_open", reason="cordon circuit breaker tripped"),),
         Decision.HELD),
    Case("breaker trips", (act("cordon", "blocked", "trip_breaker", reason="pool 'h100' has 2 of 4 nodes "
                                                                            "cordoned by xidpipe"),), Decision.HELD),
    Case("cordon failed", (act("cordon", "failed", "cordon", reason="Kubernetes API 503"),), Decision.FAILED),
    Case("released", (act("cordon", "done", "cordon"), act("release", "done", "release", after_s=60,
                                                           reason="lift xidpipe's cordon for incident i")),
         Decision.RELEASED),
    Case("not needed, then cordoned", (act("cordon", "skipped", "not_needed", reason="below the threshold"),
                                       act("cordon", "done", "cordon", after_s=30)), Decision.CORDONED),
    Case("GPU quarantined", (act("quarantine", "done", "quarantine", reason="rule dbe-gpu: quarantine the GPU"),),
         Decision.QUARANTINED),
    Case("GPU quarantined, redelivered", (act("quarantine", "done", "quarantine"),
                                          act("quarantine", "noop", "already_quarantined", after_s=9,
                                              reason="the GPU's DeviceTaintRule is xidpipe's for this incident")),
         Decision.QUARANTINED),
    Case("GPU quarantine in dry run", (act("quarantine", "dry_run", "quarantine", dry_run=True),), Decision.DRY_RUN),
    Case("someone changed the GPU's rule", (act("quarantine", "skipped", "foreign_quarantine",
                                                reason="the GPU's DeviceTaintRule was changed by someone else"),),
         Decision.REFUSED),
    Case("GPU quarantine lifted", (act("quarantine", "done", "quarantine"),
                                   act("unquarantine", "done", "release", after_s=60,
                                       reason="lift xidpipe's quarantine of the GPU")), Decision.RELEASED),
]


def dossier(case: Case) -> Dossier:
    """The DBE incident (Xid 13 seen first, Xid 48 decisive) with the case's action record."""
    codes = [CodeInfo(code="Xid 13", count=3, immediate_action="RESTART_APP", investigatory_action="WORKFLOW_XID_13"),
             CodeInfo(code="Xid 48", count=1, immediate_action="WORKFLOW_XID_48",
                      investigatory_action="WORKFLOW_XID_48"),
             CodeInfo(code="Xid 63", count=1, immediate_action="IGNORE", investigatory_action="IGNORE")]
    workload = case.component == "workload"
    return Dossier(
        incident_id="v2:9af48e81bb6cb563@20261125T125203.000000Z", fingerprint="v2:9af48e81bb6cb563", cluster="demo",
        node="gpu-node-02", family="application" if workload else "memory",
        category="application" if workload else "hardware", reason="GPU memory error", status="open", count=4,
        first_seen=T0 - timedelta(minutes=50), last_seen=T0, codes=codes, catalog_version="2026.11-2",
        gpu=DossierGpu(index=0, uuid="GPU-a40e77c1", serial="1654923008817", pci="0000:b7:00.0"),
        evidence=[EvidenceItem(name="kernel-log", source="node", captured_at=T0,
                               content="2026-11-25T12:52:08Z  NVRM: Xid (PCI:0000:b7:00): 48, An uncorrectable\n")],
        actions=list(case.records), component=case.component,
    )


def texts(value: Any) -> list[str]:
    """Every text of a JSON document (ADF, Block Kit)."""
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in ([v] if k == "text" and isinstance(v, str) else texts(v))]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


FIELDS = TicketFields("GPU", "Bug", "High", ("gpu-hardware",), ("xidpipe", "xidpipe-inc-case"))


def sinks(d: Dossier, tmp: Path) -> dict[str, str]:
    """What each sink says about the incident, as text."""
    tracker, chat = OutboxTracker(tmp), OutboxChat(tmp)
    tracker.create(FIELDS, "title", TicketBody.of(d))
    folder = tmp / "jira" / "case"
    message: GroupMessage = group_message([IncidentNotice(dossier=d)], lambda _: None, "https://x.example")
    chat.post("#gpu-infra", message, "k")
    [posted] = chat.messages("#gpu-infra")
    rendered = render_json(d)
    row = Incident(incident_id=d.incident_id, fingerprint=d.fingerprint, node=d.node, gpu=d.gpu.pci or "",
                   family=d.family, status=d.status, category=d.category, reason=d.reason, count=d.count,
                   first_seen=d.first_seen, last_seen=d.last_seen, codes=[c.code for c in d.codes],
                   component=d.component, lifecycle="open")
    api = {"incident": data.incident_json(row, d.actions), "dossier": rendered}
    page = ENV.get_template("incident.html").render(d=rendered, inc=api["incident"], timeline=[], transitions=[],
                                                    steps=(), done=None, who=None, csrf="", path="/")
    return {
        "jira wiki": (folder / "description.wiki").read_text(),
        "jira adf": " ".join(texts(json.loads((folder / "description.adf.json").read_text()))),
        "outbox ticket": (folder / "ticket.md").read_text(),
        "slack": " ".join(texts(posted["blocks"])) + " " + posted["text"],
        "page": html.unescape(page),
        "api": json.dumps(api),
    }


SINKS = ("jira wiki", "jira adf", "outbox ticket", "slack", "page", "api")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_sink_says_the_decision_the_record_holds(case: Case, tmp_path: Path) -> None:
    d = dossier(case)
    acct = account_of(d)
    assert acct.decision is case.decision, case.name
    said = sinks(d, tmp_path)
    assert set(said) == set(SINKS)
    others = [headline_of(x) for x in Decision if x is not case.decision]
    mine = headline_of(case.decision)
    for sink, text in said.items():
        flat = " ".join(text.replace("\\", "").split())
        if sink != "api":
            assert mine in flat, (sink, mine)
            for other in others:
                assert other in mine or other not in flat, (sink, other)
            assert (case.decision is Decision.CORDONED) == ("is cordoned by xidpipe" in flat), sink
            dry = "dry run" in flat.lower() or "dry-run" in flat.lower()
            assert dry == (case.decision is Decision.DRY_RUN), (sink, "dry run")
            if case.component != "workload":
                assert "WORKFLOW_XID_48 for Xid 48" in flat, sink  # the decisive code's action, not Xid 13's
        if case.records and case.decision is not Decision.RELEASED:
            assert case.records[-1].reason.split(":")[0] in flat, (sink, "the decision's own reason")
    api = json.loads(said["api"])
    assert api["incident"]["decision"] == case.decision.value
    assert api["incident"]["cordon_requested"] is (case.decision in REQUESTED)
    assert api["dossier"]["account"]["decision"] == case.decision.value
    assert api["dossier"]["account"]["cordon_requested"] is (case.decision in REQUESTED)


def headline_of(decision: Decision) -> str:
    from models.account import Account

    return headline(Account(node="n", decision=decision, reason="r", cordon_requested=False))


def test_the_table_covers_every_decision_and_every_cordon_outcome() -> None:
    from models.vocabulary import CordonOutcome

    assert {c.decision for c in CASES} == set(Decision)
    recorded = {r.decision for c in CASES for r in c.records if r.action in CORDON_ACTIONS}
    assert recorded >= {o.value for o in CordonOutcome} - {"repeat"}
