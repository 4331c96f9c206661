"""What to do now: the plain-language steps at the top of every ticket and chat message.

The steps are data (`models/catalog/runbook.yaml`, reviewed in one place): one entry per
immediate action of NVIDIA's Xid catalog and one per incident class no single Xid decides.
`what_to_do` chooses the entries for an incident, purely, and says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from models.identity import VANISHED_CODES
from models.vocabulary import Category, ComponentKind, Family, ImmediateAction

# The runbook's entries for incident classes no single Xid decides; every other entry is an
# `ImmediateAction`, and the runbook's `order` is the actions' precedence (the most drastic first).
CLASS_KEYS = ("application", "bug_report", "gpu_lost", "gpus_gone", "nvswitch", "fleet", "no_catalog_action")


@dataclass(frozen=True, slots=True)
class Runbook:
    order: tuple[str, ...]
    classes: Mapping[str, tuple[str, ...]]
    actions: Mapping[str, tuple[str, ...]]

    def steps(self, key: str) -> tuple[str, ...]:
        return self.actions.get(key) or self.classes.get(key) or ()


@dataclass(frozen=True, slots=True)
class WhatToDo:
    steps: tuple[str, ...]
    reason: str  # which entries were chosen, and why
    entries: tuple[str, ...]


def parse_runbook(data: Mapping[str, Any]) -> Runbook:
    """A runbook from its YAML object; a missing section or an empty entry is an error."""
    try:
        order = tuple(str(k) for k in data["order"])
        classes = {str(k): tuple(str(s) for s in v) for k, v in data["classes"].items()}
        actions = {str(k): tuple(str(s) for s in v) for k, v in data["actions"].items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"runbook: needs the sections order, classes and actions ({exc})") from None
    empty = sorted(k for k, v in {**classes, **actions}.items() if not v)
    if empty:
        raise ValueError(f"runbook: entries without steps: {', '.join(empty)}")
    unknown = sorted(k for k in order if k not in classes and k not in actions)
    if unknown:
        raise ValueError(f"runbook: order names entries that do not exist: {', '.join(unknown)}")
    missing = sorted(k for k in CLASS_KEYS if k not in classes)
    if missing:
        raise ValueError(f"runbook: missing class entries: {', '.join(missing)}")
    return Runbook(order, classes, actions)


@cache
def load_runbook() -> Runbook:
    text = resources.files("models.catalog").joinpath("runbook.yaml").read_text(encoding="utf-8")
    return parse_runbook(yaml.safe_load(text))


class _Facts(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def what_to_do(*, component: str, category: str, family: str, actions: Sequence[str],
               investigatory: Sequence[str] = (), messages: Sequence[str] = (), codes: Sequence[str] = (),
               facts: Mapping[str, str] | None = None, runbook: Runbook | None = None) -> WhatToDo:
    """The steps for an incident from its class and its codes' catalog actions.

    `actions`: the codes' immediate actions (RESTART_BM, ...), `investigatory`: their investigatory
    actions (a CONTACT_SUPPORT there adds the support steps), `messages`: the driver's own lines
    (one asking for nvidia-bug-report.sh puts that first), `codes`: the incident's codes (a node whose
    GPUs vanished, `models.identity.VANISHED_CODES`, takes the guide's section 十六). `facts` fill the
    placeholders.
    """
    rb = runbook or load_runbook()
    chosen: list[str] = []
    if any("nvidia-bug-report" in m for m in messages):
        chosen.append("bug_report")
    if category == Category.APPLICATION:
        chosen.append("application")
        why = "an application fault: its owners act, not the infrastructure team"
    elif component == ComponentKind.FLEET:
        chosen.append("fleet")
        why = "a fault family on many nodes at once: look for the common cause"
    else:
        present = set(actions)
        if family == Family.GPU_LOST:
            present.add("gpu_lost")
        if component == ComponentKind.NODE and VANISHED_CODES.intersection(codes):
            present.add("gpus_gone")
        if component == ComponentKind.NVSWITCH:
            present.add("nvswitch")
        support = ImmediateAction.CONTACT_SUPPORT
        primary = next((k for k in rb.order if k in present and k not in (support, ImmediateAction.IGNORE)), None)
        if primary is None:
            primary = next((k for k in rb.order if k in present), "no_catalog_action")
        chosen.append(primary)
        if primary != support and support in present | set(investigatory):
            chosen.append(support)
        why = f"the first of the runbook's order among {', '.join(sorted(present)) or 'no catalog action'}"
    values = _Facts(facts or {})
    steps = tuple(dict.fromkeys(s.format_map(values) for key in chosen for s in rb.steps(key)))
    return WhatToDo(steps, f"{', '.join(chosen)}: {why}", tuple(chosen))
