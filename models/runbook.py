"""What to do now: the plain-language steps at the top of every ticket, chat message and incident page.

The steps are data (`models/catalog/runbook.yaml`, reviewed in one place): one entry per immediate
action of NVIDIA's Xid catalog and one per incident class no single Xid decides, each laid out in the
phases of the operations guide's Xid procedure (`PHASES`): what xidpipe already kept, what must still
be collected before anything is reset, drain or quarantine, the vendor's action, validation, RMA.
`what_to_do` chooses the entry for an incident (its class, else its decisive code's:
`models.decisive`), says the isolate phase from the cordon decision (`models.account.Decision`),
and fills in the facts, purely, with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml

from models.account import Decision
from models.decisive import RECOVERY_KEYS, Decisive
from models.identity import VANISHED_CODES
from models.vocabulary import Category, ComponentKind, Family, ImmediateAction, values

Phase = Literal["saved", "collect", "isolate", "vendor", "validate", "rma"]
# The guide's order (section 十): keep the evidence, collect what is still missing before any reset,
# take the work off the node, do what the vendor says, check, replace on repeats.
PHASES: tuple[Phase, ...] = ("saved", "collect", "isolate", "vendor", "validate", "rma")
Isolate = Literal["drain", "stay", "skip"]
# The runbook's entries for incident classes no single Xid decides; every other entry is an
# `ImmediateAction`, and the runbook's `order` is the entries' precedence (the most drastic first).
CLASS_KEYS = ("application", "fleet", "gpu_lost", "gpus_gone", "nvswitch_fatal", "nvswitch_non_fatal",
              "no_catalog_action")
_STEP_PHASES = ("collect", "vendor", "validate", "rma")
DRAINED = "cordoned_drained"  # the isolate step of a node cordoned and drained by xidpipe


@dataclass(frozen=True, slots=True)
class Entry:
    bug_report: bool
    isolate: Isolate
    steps: Mapping[str, tuple[str, ...]]  # phase → steps (collect, vendor, validate, rma)


@dataclass(frozen=True, slots=True)
class Runbook:
    order: tuple[str, ...]
    entries: Mapping[str, Entry]
    saved: Mapping[str, str]  # kept, none
    bug_report: Mapping[str, str]  # asked, plain
    isolate: Mapping[str, Mapping[str, str]]  # drain|stay → decision → step
    recovery: str
    support: tuple[str, ...]

    @property
    def actions(self) -> tuple[str, ...]:
        """The entries that are NVIDIA's immediate actions."""
        return tuple(k for k in self.entries if k in _ACTIONS)


@dataclass(frozen=True, slots=True)
class WhatToDo:
    phased: tuple[tuple[Phase, str], ...]  # the steps in order, each with its phase
    reason: str  # which entry was chosen, and why
    entries: tuple[str, ...]

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(text for _, text in self.phased)


_ACTIONS = frozenset(values(ImmediateAction))


def _texts(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise ValueError(f"runbook: {where} must be a list of steps")
    return tuple(value)


def _entry(key: str, data: Any) -> Entry:
    if not isinstance(data, dict):
        raise ValueError(f"runbook: entry {key} must be a mapping")
    unknown = sorted(set(data) - {"bug_report", "isolate", *_STEP_PHASES})
    if unknown:
        raise ValueError(f"runbook: entry {key} has unknown fields: {', '.join(unknown)}")
    isolate = data.get("isolate")
    if isolate not in ("drain", "stay", "skip"):
        raise ValueError(f"runbook: entry {key}: isolate must be drain, stay or skip, not {isolate!r}")
    steps = {p: _texts(data.get(p), f"{key}.{p}") for p in _STEP_PHASES}
    if not any(steps.values()):
        raise ValueError(f"runbook: entry {key} has no steps")
    return Entry(bool(data.get("bug_report")), isolate, steps)


def parse_runbook(data: Mapping[str, Any]) -> Runbook:
    """A runbook from its YAML object; a missing section, entry or decision is an error."""
    try:
        order = tuple(str(k) for k in data["order"])
        entries = {str(k): _entry(str(k), v) for k, v in data["entries"].items()}
        saved = {k: str(data["saved"][k]) for k in ("kept", "none")}
        bug_report = {k: str(data["bug_report"][k]) for k in ("asked", "plain")}
        isolate = {kind: {str(d): str(t) for d, t in data["isolate"][kind].items()} for kind in ("drain", "stay")}
        recovery, support = str(data["recovery"]), _texts(data["support"], "support")
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"runbook: needs the sections order, entries, saved, bug_report, isolate, recovery and "
                         f"support ({exc})") from None
    unknown = sorted(k for k in order if k not in entries)
    if unknown:
        raise ValueError(f"runbook: order names entries that do not exist: {', '.join(unknown)}")
    missing = sorted(k for k in (*CLASS_KEYS, *_ACTIONS) if k not in entries)
    if missing:
        raise ValueError(f"runbook: missing entries: {', '.join(missing)}")
    for kind, texts in isolate.items():
        wanted = {*values(Decision), *([DRAINED] if kind == "drain" else [])}
        lacking = sorted(wanted - set(texts))
        if lacking:
            raise ValueError(f"runbook: isolate.{kind} lacks the decisions {', '.join(lacking)}")
    return Runbook(order, entries, saved, bug_report, isolate, recovery, support)


@cache
def load_runbook() -> Runbook:
    text = resources.files("models.catalog").joinpath("runbook.yaml").read_text(encoding="utf-8")
    return parse_runbook(yaml.safe_load(text))


class _Facts(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def entry_for(*, component: str, category: str, family: str, decisive: Decisive, runbook: Runbook,
              codes: Sequence[str] = ()) -> tuple[str, str]:
    """The runbook entry an incident follows, and why; `codes`: the incident's codes (a node whose GPUs
    vanished, `models.identity.VANISHED_CODES`, takes the guide's section 十六)."""
    if category == Category.APPLICATION:
        return "application", "an application fault: its owners act, not the infrastructure team"
    if component == ComponentKind.FLEET:
        return "fleet", "a fault family on many nodes at once: look for the common cause"
    if component == ComponentKind.NODE and VANISHED_CODES.intersection(codes):
        return "gpus_gone", "the node's GPUs are gone from the driver, the device plugin or the scheduler"
    if family == Family.GPU_LOST:
        return "gpu_lost", "the GPU is lost from the bus"
    if decisive.key is not None and decisive.key in runbook.entries:
        return decisive.key, f"the decisive code: {decisive.reason}"
    return "no_catalog_action", f"no catalog action for {decisive.code or 'its codes'}"


def what_to_do(*, component: str, category: str, family: str, decisive: Decisive, decision: Decision,
               drained: bool = False, investigatory: Sequence[str] = (), messages: Sequence[str] = (),
               evidence: bool = False, codes: Sequence[str] = (), facts: Mapping[str, str] | None = None,
               runbook: Runbook | None = None) -> WhatToDo:
    """The steps for an incident, phase by phase.

    `decisive`: its decisive code and NVIDIA's action (`models.decisive.decisive`); `decision`: what the
    cordon decision came to (the isolate phase says that, never more), `drained`: xidpipe's drain
    evicted the node's pods after its cordon; `investigatory`: its codes'
    investigatory actions (a CONTACT_SUPPORT there adds the support steps); `messages`: the driver's
    own lines (one asking for `nvidia-bug-report.sh` is said so); `evidence`: the dossier holds the
    node's capture; `codes`: the incident's codes (`entry_for`). `facts` fill the placeholders.
    """
    rb = runbook or load_runbook()
    key, why = entry_for(component=component, category=category, family=family, decisive=decisive, runbook=rb,
                         codes=codes)
    entry = rb.entries[key]
    out: list[tuple[Phase, str]] = []
    if evidence:
        out.append(("saved", rb.saved["kept"]))
    elif entry.bug_report:  # a fault whose evidence matters before any reset, and none is held
        out.append(("saved", rb.saved["none"]))
    asked = any("nvidia-bug-report" in m for m in messages)
    if asked or entry.bug_report:
        out.append(("collect", rb.bug_report["asked" if asked else "plain"]))
    out += [("collect", s) for s in entry.steps["collect"]]
    if entry.isolate != "skip":
        said = DRAINED if entry.isolate == "drain" and decision is Decision.CORDONED and drained else decision
        out.append(("isolate", rb.isolate[entry.isolate][said]))
    rec = decisive.recovery
    if rec is not None and RECOVERY_KEYS.get(rec.name) != ImmediateAction.IGNORE and key != "application":
        out.append(("vendor", rb.recovery))
    out += [(p, s) for p in ("vendor", "validate", "rma") for s in entry.steps[p]]
    chosen = [key]
    support = ImmediateAction.CONTACT_SUPPORT
    if key not in (support, "application", "fleet") and support in investigatory:
        out += [("rma", s) for s in rb.support]
        chosen.append(support)
    values_ = _Facts(facts or {})
    steps = tuple(dict.fromkeys((phase, s.format_map(values_)) for phase, s in out))
    return WhatToDo(steps, f"{', '.join(chosen)}: {why}", tuple(chosen))
