"""Jira tickets for incidents: which ticket, with which fields, and what to do with it now.

Pure functions from values to a decision that carries its reason; the Jira adapter gathers the
facts (the incident→ticket map in SQL, the ticket's status in Jira) and carries the decision out.

- `ticket_fields` chooses project, issue type, priority, assignee, components and labels from the
  incident (node pool, GPU model, fault class, severity, owning team). The priority is the policy's
  Jira name for the incident's severity (`models.severity`: one table for every sink); the assignee
  and extra components come from the owner routing (`owners`) when it names the incident's team.
  The labels always carry the incident fingerprint in a form Jira accepts (`xidpipe-fp-<hex>`), so
  a lost map is recovered by a JQL search on that label.
- `decide_ticket` returns create / comment / reopen / link / attach / none:
  * create: the first ticket for an incident whose class calls for one;
  * comment: repeats (at most one comment per `comment_interval`, `models.repeats.repeat_gate`; the
    repeats in between are folded into the next comment, never dropped) and reclassifications (at once);
  * reopen or link: a recurrence after the previous incident's ticket was resolved (the policy
    says which), or new faults on a ticket someone resolved while the incident was still open;
  * attach: evidence that arrived after the ticket was created;
  * none: nothing new, a rate-limited repeat, or a class that gets no ticket.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from models.repeats import repeat_gate
from models.severity import Severity
from models.vocabulary import Category

TICKET_CATEGORIES = frozenset({Category.HARDWARE, Category.DRIVER, Category.INTERCONNECT, Category.SUSPECTED_HARDWARE,
                               Category.FLEET})
FP_LABEL_PREFIX = "xidpipe-fp-"
INCIDENT_LABEL_PREFIX = "xidpipe-inc-"
_LABEL_UNSAFE = re.compile(r"[^a-z0-9._-]+")


class TicketOwner(BaseModel):
    """Where a team's tickets go in Jira."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    assignee: str | None = Field(default=None, description="Jira user the ticket is assigned to: the user name on "
                                 "Jira Server and Data Center, the account id on Jira Cloud")
    components: tuple[str, ...] = Field(default=(), description="Jira components added to the team's tickets")


_REPLACED = {"default_priority": "priority_by_severity", "priority_by_category": "priority_by_severity",
             "priority_by_family": "priority_by_severity"}


class TicketPolicy(BaseModel):
    """What a ticket looks like and when it is written. Durations are seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str = Field(default="GPU", description="Jira project key for tickets of any pool not in project_by_pool")
    project_by_pool: dict[str, str] = Field(
        default_factory=dict, description="node pool → project key, for pools whose hardware another team owns")
    issue_type: str = Field(default="Bug", description="issue type name of every ticket")
    issue_type_by_category: dict[Category, str] = Field(default_factory=dict,
                                                        description="category → issue type name")
    ticket_application: bool = Field(
        default=False, description="also open tickets for application faults (they go to the owning team's chat "
        "instead by default: the workload, not the card, needs fixing)")
    categories: frozenset[Category] = Field(default=TICKET_CATEGORIES, description="classes that get a ticket")
    priority_by_severity: dict[Severity, str] = Field(
        default_factory=lambda: {Severity.CRITICAL: "Highest", Severity.ERROR: "High", Severity.WARNING: "Medium",
                                 Severity.INFO: "Low"},
        description="severity (models.severity: from the fault family and the cordon decision) → Jira priority name "
        "(a Jira whose priorities are named otherwise maps them here)")
    owners: dict[str, TicketOwner] = Field(
        default_factory=dict, description="the owner routing: team → its Jira assignee and components. An incident's "
        "team is its workload's owning team for an application fault (the pod's owner label), else team_by_pool's "
        "team for its node pool, else infra_team")
    team_by_pool: dict[str, str] = Field(default_factory=dict, description="node pool → the team that owns its "
                                         "hardware")
    infra_team: str | None = Field(default=None, description="the team that owns hardware, driver, interconnect and "
                                   "fleet incidents of pools not in team_by_pool")
    components_by_category: dict[Category, list[str]] = Field(
        default_factory=lambda: {Category.HARDWARE: ["gpu-hardware"], Category.SUSPECTED_HARDWARE: ["gpu-hardware"],
                                 Category.INTERCONNECT: ["nvlink-fabric"], Category.DRIVER: ["gpu-driver"],
                                 Category.FLEET: ["gpu-fleet"], Category.APPLICATION: ["gpu-workloads"]},
        description="category → Jira component names")
    components_by_pool: dict[str, list[str]] = Field(default_factory=dict, description="node pool → extra components")
    labels: tuple[str, ...] = Field(default=("xidpipe",), description="labels on every ticket")
    comment_interval_s: float = Field(
        default=3600.0, ge=0, description="at most one repeat comment per ticket per this many seconds (1 h: a "
        "storm of repeats becomes one comment an hour with the running count, not a page of noise)")
    recurrence: Literal["reopen", "link"] = Field(
        default="reopen", description="a recurrence after resolution reopens the old ticket, or opens a new one "
        "linked to it")
    reopen_transition: str = Field(default="Reopen", description="name of the workflow transition that reopens")
    resolve_transition: str = Field(default="Done", description="name of the workflow transition that resolves: "
                                    "taken when a remediation loop returned the node to service after validation")
    link_type: str = Field(default="Relates", description="issue link type between a recurrence and its predecessor")

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            gone = sorted(k for k in data if k in _REPLACED)
            if gone:
                raise ValueError(f"{', '.join(gone)}: replaced by priority_by_severity (severity → Jira priority "
                                 "name; the severity table is models.severity, docs/notifications.md)")
        return data

    @property
    def comment_interval(self) -> timedelta:
        return timedelta(seconds=self.comment_interval_s)


@dataclass(frozen=True, slots=True)
class TicketSubject:
    """An incident as the ticket decisions see it."""

    incident_id: str
    fingerprint: str
    category: str
    family: str
    node: str
    status: str  # open, resolved
    count: int
    last_seen: datetime
    node_pool: str | None = None
    gpu_model: str | None = None
    previous_incident_id: str | None = None
    evidence: frozenset[str] = frozenset()  # attachment names available now
    severity: Severity = Severity.WARNING  # the one severity table's (models.severity)
    owner: str | None = None  # the workload's owning team, where known


@dataclass(frozen=True, slots=True)
class TicketState:
    """What the ticket map in SQL says about an incident's ticket."""

    key: str
    created_at: datetime
    category: str
    count: int  # occurrences the ticket already tells of
    last_comment_at: datetime | None = None
    attached: frozenset[str] = frozenset()
    resolved: bool = False  # the ticket's status category in Jira is "done"


@dataclass(frozen=True, slots=True)
class TicketFields:
    project: str
    issue_type: str
    priority: str
    components: tuple[str, ...]
    labels: tuple[str, ...]
    assignee: str | None = None


TicketAction = Literal["create", "comment", "reopen", "link", "attach", "none"]


@dataclass(frozen=True, slots=True)
class TicketDecision:
    action: TicketAction
    reason: str
    key: str | None = None  # the ticket acted on (comment, reopen, attach; link: the predecessor)
    comment: str | None = None
    attach: tuple[str, ...] = ()
    not_before: datetime | None = None  # for a rate-limited repeat: when a comment may be written
    fields: TicketFields | None = field(default=None)


def label_safe(text: str) -> str:
    """A Jira label: lower case, no spaces; anything else becomes '-'."""
    return _LABEL_UNSAFE.sub("-", text.lower()).strip("-") or "unknown"


def fingerprint_label(fingerprint: str) -> str:
    """`v1:3f2a9c…` → `xidpipe-fp-v1-3f2a9c…`: searchable with JQL `labels = "…"`."""
    return FP_LABEL_PREFIX + label_safe(fingerprint)


def incident_label(incident_id: str) -> str:
    """The label that tells which incident(s) a ticket covers (recurrences share the fingerprint)."""
    return INCIDENT_LABEL_PREFIX + label_safe(incident_id)


def wants_ticket(category: str, policy: TicketPolicy) -> tuple[bool, str]:
    if category == Category.APPLICATION:
        if policy.ticket_application:
            return True, "application tickets are enabled by policy"
        return False, "application faults get no ticket (ticket_application is off): the owning team is notified"
    if category in policy.categories:
        return True, f"{category} incidents get a ticket"
    return False, f"{category} incidents get no ticket by policy"


_V = TypeVar("_V")


def _by(mapping: Mapping[Any, _V], name: str, default: _V) -> _V:
    """A policy table's entry for a name as the incident row holds it (a `Category` or `Family` key
    equals its string)."""
    return mapping.get(name, default)


def team_of(s: TicketSubject, policy: TicketPolicy) -> str | None:
    """The team an incident's ticket belongs to: the workload's owners for an application fault, else
    the team of its node pool, else the infrastructure team."""
    if s.category == Category.APPLICATION:
        return s.owner
    return policy.team_by_pool.get(s.node_pool or "", policy.infra_team)


def ticket_fields(s: TicketSubject, policy: TicketPolicy) -> TicketFields:
    pool = s.node_pool or ""
    project = policy.project_by_pool.get(pool, policy.project)
    issue_type = _by(policy.issue_type_by_category, s.category, policy.issue_type)
    priority = _by(policy.priority_by_severity, s.severity, "Medium")
    team = team_of(s, policy)
    owner = policy.owners.get(team) if team else None
    components = tuple(dict.fromkeys([*_by(policy.components_by_category, s.category, []),
                                      *policy.components_by_pool.get(pool, []),
                                      *(owner.components if owner else ())]))
    labels = [*policy.labels, fingerprint_label(s.fingerprint), incident_label(s.incident_id),
              f"xidpipe-{label_safe(s.category)}",
              f"xidpipe-family-{label_safe(s.family)}"]
    if s.node_pool:
        labels.append(f"pool-{label_safe(s.node_pool)}")
    if s.gpu_model:
        labels.append(f"gpu-{label_safe(s.gpu_model)}")
    return TicketFields(project, issue_type, priority, components, tuple(dict.fromkeys(labels)),
                        owner.assignee if owner else None)


def decide_ticket(
    s: TicketSubject,
    state: TicketState | None,
    previous: TicketState | None,
    now: datetime,
    policy: TicketPolicy,
) -> TicketDecision:
    """What to do with the ticket of incident `s` now, and why.

    `state` is this incident's ticket (from the map), `previous` the ticket of the incident this one
    recurs after (`s.previous_incident_id`), with `resolved` read from Jira.
    """
    fields = ticket_fields(s, policy)
    if state is None:
        wanted, why = wants_ticket(s.category, policy)
        if not wanted:
            return TicketDecision("none", why)
        if s.status == "resolved":
            return TicketDecision("none", "the incident was resolved before a ticket was opened")
        if previous is not None:
            if not previous.resolved:
                return TicketDecision("comment", f"recurrence of {s.previous_incident_id}: its ticket {previous.key} "
                                                 "is still open, so the recurrence is told there",
                                      key=previous.key, comment=_recurrence_comment(s), fields=fields,
                                      attach=tuple(sorted(s.evidence - previous.attached)))
            if policy.recurrence == "reopen":
                return TicketDecision("reopen", f"recurrence of {s.previous_incident_id} after its ticket "
                                                f"{previous.key} was resolved: reopened", key=previous.key,
                                      comment=_recurrence_comment(s), fields=fields,
                                      attach=tuple(sorted(s.evidence - previous.attached)))
            return TicketDecision("link", f"recurrence of {s.previous_incident_id} after its ticket {previous.key} "
                                          f"was resolved: a new ticket linked to it", key=previous.key,
                                  fields=fields, attach=tuple(sorted(s.evidence)))
        return TicketDecision("create", f"{why}: first ticket for incident {s.incident_id}", fields=fields,
                              attach=tuple(sorted(s.evidence)))
    new_evidence = tuple(sorted(s.evidence - state.attached))
    new_faults = s.count - state.count
    if state.resolved and new_faults > 0 and s.status == "open":
        return TicketDecision("reopen", f"{new_faults} new fault(s) after ticket {state.key} was resolved",
                              key=state.key, comment=_repeat_comment(s, state), attach=new_evidence, fields=fields)
    if s.category != state.category:
        return TicketDecision("comment", f"reclassified from {state.category} to {s.category}", key=state.key,
                              comment=f"xidpipe reclassified incident {s.incident_id} from {state.category} to "
                                      f"{s.category} ({s.count} occurrence(s) so far).",
                              attach=new_evidence, fields=fields)
    if new_faults > 0:
        gate = repeat_gate(now - (state.last_comment_at or state.created_at), policy.comment_interval)
        ready = now + gate.wait
        if gate.due:
            return TicketDecision("comment", f"{new_faults} repeat(s) since the last update of {state.key}",
                                  key=state.key, comment=_repeat_comment(s, state), attach=new_evidence,
                                  fields=fields)
        if new_evidence:
            return TicketDecision("attach", f"{len(new_evidence)} evidence file(s) arrived after the ticket was "
                                            f"written; repeats rate-limited until {ready.isoformat()}",
                                  key=state.key, attach=new_evidence, not_before=ready, fields=fields)
        return TicketDecision("none", f"{new_faults} repeat(s) rate-limited: at most one comment per "
                                      f"{_fmt(policy.comment_interval)}, next after {ready.isoformat()}",
                              key=state.key, not_before=ready)
    if new_evidence:
        return TicketDecision("attach", f"{len(new_evidence)} evidence file(s) arrived after the ticket was written",
                              key=state.key, attach=new_evidence, fields=fields)
    return TicketDecision("none", f"nothing new since the last update of {state.key}", key=state.key)


def _recurrence_comment(s: TicketSubject) -> str:
    return (f"The fault recurred: incident {s.incident_id} on {s.node} ({s.family}, {s.category}), "
            f"{s.count} occurrence(s), last at {s.last_seen.isoformat()}. "
            f"Previous incident: {s.previous_incident_id}.")


def _repeat_comment(s: TicketSubject, state: TicketState) -> str:
    return (f"{s.count - state.count} more occurrence(s) of incident {s.incident_id} on {s.node} "
            f"({s.count} in all, last at {s.last_seen.isoformat()}).")


def comment_marker(incident_id: str, count: int, category: str) -> str:
    """A line that identifies a comment, so a retried comment is recognised and not written twice."""
    return f"(xidpipe update {incident_id} #{count} {category})"


def _fmt(d: timedelta) -> str:
    s = int(d.total_seconds())
    if s and s % 3600 == 0:
        return f"{s // 3600}h"
    if s and s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"
