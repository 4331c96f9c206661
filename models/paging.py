"""What a paging destination is told about one incident, and when: pure.

A paging destination (Alertmanager, PagerDuty, a CloudEvents endpoint) is told about every incident
on its own, never about a group: it groups, routes, silences, inhibits and escalates itself, and
xidpipe must not do it a second time before it. What it is told is a sequence of events per
incident, each of one `PageKind`:

- `opened`: the incident is open and the destination has not been told of it yet, or was told it
  resolved and it opened again: then a new alert, of the next `generation` (`alert_key`), as
  PagerDuty documents that a `dedup_key` triggered after its resolve opens a new incident;
- `changed`: something the page says changed (its title, category, severity, the cordon decision
  as the account words it, the codes): its `revision` (`facts_of`); more faults of the same codes
  are not news for a pager;
- `cordon`: a step the responder took on the incident's node or GPU (a cordon, its repeat or
  release, a drain, a GPU quarantine), one per recorded action;
- `remediation`: a transition of the incident's remediation loop, as the responder tells it;
- `resolved`: the incident resolved after the destination was told it was open;
- `refresh`: nothing new, but the destination forgets an alert it stops hearing about
  (Alertmanager resolves it `resolve_timeout` after the last receipt), so a firing incident is sent
  again every `PagePolicy.resend` (the repeat gate of `models.repeats`).

`decide_pages` is the one decision: from the incident's facts (`PageFacts`), what the destination
was told (`PageLog`, written after each accepted event) and the policy, the events due now, in
order, with the reason. An incident resolved before it was ever told is not told at all (as a chat
group), and one below the destination's `min_severity` is not opened, nor opened again (once open,
every later event goes to it). Steps recorded after the resolution was told are still told (a
cordon's release comes after its incident resolved). Each event has a stable id (`event_id`): the
same event retried carries the same id, so a destination that deduplicates by it (a CloudEvents
consumer by `source` + `id`) takes it once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from models.account import ActionItem, decision_text
from models.dossier import Dossier, account_of, severity_of, title
from models.repeats import repeat_gate
from models.severity import SEVERITIES, Severity

PageStatus = Literal["firing", "resolved"]


class PageKind(StrEnum):
    OPENED = "opened"
    CHANGED = "changed"
    CORDON = "cordon"
    REMEDIATION = "remediation"
    RESOLVED = "resolved"
    REFRESH = "refresh"


# The actions of the action record that are the incident's cordon steps (the cordon decision, its release,
# the drain, a GPU's quarantine and its release, the breaker's trip that held it).
STEP_ACTIONS = frozenset({"cordon", "repeat", "release", "evict", "quarantine", "unquarantine", "breaker_trip"})


@dataclass(frozen=True, slots=True)
class Step:
    """A step taken on the incident: a recorded cluster action (`cordon`) or a remediation transition."""

    key: str  # stable: the same step is the same key (what the log remembers as told)
    kind: Literal["cordon", "remediation"]
    at: datetime
    text: str  # one line, plain, redacted by the caller
    action: str = ""  # cordon, repeat, release, evict, quarantine ...; the remediation loop's stage entered
    outcome: str = ""  # what it came to (done, dry_run, blocked, failed ...)


@dataclass(frozen=True, slots=True)
class PageFacts:
    """What a page says about the incident now, as far as the decision needs it."""

    incident_id: str
    status: PageStatus
    severity: Severity
    revision: str  # `revision()` of what the page says
    steps: tuple[Step, ...] = ()  # the cordon steps recorded so far, oldest first


@dataclass(frozen=True, slots=True)
class PageLog:
    """What the destination was told of the incident (written only after it accepted an event)."""

    status: PageStatus
    revision: str
    steps: frozenset[str]  # the keys of the steps told
    sent_at: datetime
    generation: int = 1  # how often the incident was opened to the destination (a reopen is the next)


@dataclass(frozen=True, slots=True)
class PagePolicy:
    min_severity: Severity = Severity.INFO  # an incident less urgent than this is not opened
    resend: timedelta | None = None  # re-send a firing incident this often (Alertmanager); None: never


@dataclass(frozen=True, slots=True)
class PageItem:
    kind: PageKind
    key: str  # with the incident, the event's identity (`event_id`)
    step: Step | None = None


@dataclass(frozen=True, slots=True)
class PageDecision:
    items: tuple[PageItem, ...]
    reason: str
    resend_at: datetime | None = None  # when a refresh is due next (for a firing incident told with resend)
    generation: int = 1  # the alert the items are about (`alert_key`)


def alert_key(incident_id: str, generation: int = 1) -> str:
    """The identity of the incident's alert at a destination (PagerDuty's `dedup_key`): the incident's id,
    and for an incident opened again after its resolution was told, `<id>~<generation>`."""
    return incident_id if generation <= 1 else f"{incident_id}~{generation}"


def event_id(incident_id: str, kind: PageKind, key: str) -> str:
    """The event's stable id: 32 hex digits of (incident, kind, key)."""
    return hashlib.sha256(f"{incident_id}\x00{kind}\x00{key}".encode()).hexdigest()[:32]


def revision(parts: Mapping[str, object]) -> str:
    """A digest of what a page says (order-independent): a change of any part is a `changed` event."""
    text = "\n".join(f"{k}={parts[k]}" for k in sorted(parts))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cordon_steps(actions: Iterable[ActionItem]) -> tuple[Step, ...]:
    """The incident's cordon steps from its recorded actions, oldest first."""
    out = []
    for a in sorted((a for a in actions if a.action in STEP_ACTIONS), key=lambda a: (a.at, a.action)):
        what = a.outcome.replace("_", " ")
        why = f": {a.reason}" if a.reason else ""
        out.append(Step(key=f"{a.action}@{a.at.isoformat()}", kind="cordon", at=a.at, action=a.action,
                        outcome=a.outcome, text=f"{a.action} {what}{' (dry run)' if a.dry_run else ''}{why}"))
    return tuple(out)


def facts_of(d: Dossier) -> PageFacts:
    """The paging facts of an incident's dossier: its severity from the one table (`models.severity`),
    the cordon decision as its account words it (`models.account`), its recorded cordon steps."""
    sev = severity_of(d)
    parts = {"title": title(d), "category": d.category, "severity": sev.value,
             "decision": decision_text(account_of(d)), "codes": ",".join(sorted(c.code for c in d.codes))}
    status: PageStatus = "resolved" if d.status == "resolved" else "firing"
    return PageFacts(d.incident_id, status, sev, revision(parts), cordon_steps(d.actions))


def more_urgent_or_equal(severity: Severity, threshold: Severity) -> bool:
    return SEVERITIES.index(severity) <= SEVERITIES.index(threshold)


def _new_steps(facts: PageFacts, told: PageLog | None, extra: Sequence[Step]) -> list[PageItem]:
    seen = told.steps if told is not None else frozenset()
    out: list[PageItem] = []
    for step in (*facts.steps, *extra):
        if step.key not in seen and all(i.key != step.key for i in out):
            out.append(PageItem(PageKind(step.kind), step.key, step))
    return out


def decide_pages(facts: PageFacts, told: PageLog | None, now: datetime, policy: PagePolicy,
                 remediation: Sequence[Step] = ()) -> PageDecision:
    """The events due for the incident now, in order, and why (`remediation`: its loop's transitions
    waiting to be told)."""
    firing = facts.status == "firing"
    steps = _new_steps(facts, told, remediation)
    if told is None or told.status == "resolved":
        return _closed(facts, told, now, policy, steps)
    gen = told.generation
    items = list(steps)
    reasons = [f"{len(steps)} new step(s)"] if steps else []
    if not firing:
        items.append(PageItem(PageKind.RESOLVED, f"resolved:{gen}"))
        reasons.append("resolved")
    elif facts.revision != told.revision:
        items.insert(0, PageItem(PageKind.CHANGED, f"{gen}:{facts.revision}"))
        reasons.insert(0, "what the page says changed")
    if items:
        return PageDecision(tuple(items), ", ".join(reasons), _resend_at(policy, now) if firing else None, gen)
    if policy.resend is None:
        return PageDecision((), "nothing new", None, gen)
    gate = repeat_gate(now - told.sent_at, policy.resend)
    if gate.due:
        return PageDecision((PageItem(PageKind.REFRESH, f"{gen}@{told.sent_at.isoformat()}"),),
                            f"still firing: re-sent every {policy.resend.total_seconds():g} s",
                            _resend_at(policy, now), gen)
    return PageDecision((), "nothing new; re-sent when its interval ends", now + gate.wait, gen)


def _closed(facts: PageFacts, told: PageLog | None, now: datetime, policy: PagePolicy,
            steps: list[PageItem]) -> PageDecision:
    """The decision while the destination holds no open alert of the incident: never told, or told resolved."""
    gen = told.generation if told is not None else 0
    if facts.status != "firing":
        if told is None:
            return PageDecision((), "resolved before it was ever told: never paged", None, 1)
        why = f"{len(steps)} new step(s) after the resolution" if steps else "resolved, and told so"
        return PageDecision(tuple(steps), why, None, gen)
    if not more_urgent_or_equal(facts.severity, policy.min_severity):
        return PageDecision((), f"severity {facts.severity} is below this destination's minimum "
                                f"{policy.min_severity}: not paged", None, max(gen, 1))
    why = "opened again after it was told resolved: a new alert" if told is not None else "a new incident"
    opened = PageItem(PageKind.OPENED, f"open:{gen + 1}")
    return PageDecision((opened, *steps), why, _resend_at(policy, now), gen + 1)


def _resend_at(policy: PagePolicy, now: datetime) -> datetime | None:
    return now + policy.resend if policy.resend is not None else None
