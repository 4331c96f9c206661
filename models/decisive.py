"""An incident's decisive code: the code whose NVIDIA action is the most drastic, and that action.

An incident carries several codes (a GPU that crashed jobs with Xid 13, then reported a contained
Xid 94, an uncorrectable Xid 48 and the row remapping of Xid 63): what it is, and what must be done,
is decided by the most drastic of them, not by the first seen. Each code is given the key of its
runbook entry, and the key ranks it by the runbook's `order` (`models/catalog/runbook.yaml`, the
most drastic first):

- an Xid: NVIDIA's immediate action for it in the catalog (`WORKFLOW_XID_48` for Xid 48);
- Xid 154: the recovery action the driver's line names ("... to 0x1 (GPU Reset Required)"), as the
  action that does that recovery (`RECOVERY_KEYS`), else `XID_154` when the line names none;
- an SXid: the branch its severity in the catalog selects (`nvswitch_fatal`, `nvswitch_non_fatal`);
- anything else (AER, "fallen off the bus", a driver error line): no key, never decisive while a
  code has one (a GPU lost from the bus is the incident's family, `gpu_lost`, whose runbook entry
  comes first; its Xid 79 is the decisive code).

The codes NVIDIA says follow another Xid (`FOLLOWS_OTHER_XID`: Xid 45, "Not Solo: IGNORE (follow
other Xid)"; Xid 154, "Informational only regarding another Xid") decide only when no other code
has a key; an Xid 154's recovery action is kept apart (`Decisive.recovery`) as NVIDIA's current
instruction. Ties go to the code listed first (the incident's order). This is the one choice of the
decisive code: the engine's `models.decisive_action` asks it too. Pure: the catalog is bundled data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from models.catalog import RECOVERY_ACTIONS, Catalog, load_catalog
from models.vocabulary import CodeKind, ImmediateAction, InvestigatoryAction, stored_code

# What the driver's Xid 154 recovery action asks for, as the runbook entry that does it.
RECOVERY_KEYS: dict[str, str] = {
    "GPU_RESET": ImmediateAction.RESET_GPU, "DRAIN_AND_RESET": ImmediateAction.RESET_GPU,
    "BUS_RESET": ImmediateAction.RESET_GPU, "NODE_REBOOT": ImmediateAction.RESTART_BM,
    "SYSTEM_REBOOT": ImmediateAction.RESTART_BM, "DRAIN_P2P": ImmediateAction.RESET_GPU,
    "RECOVER_IMEX_DOMAIN": ImmediateAction.CONTACT_SUPPORT, "NONE": ImmediateAction.IGNORE,
}
# Investigatory actions of codes that report on another Xid: decisive only when no other code has a key.
FOLLOWS_OTHER_XID = frozenset({InvestigatoryAction.RESTART_FM_WHEN_SOLO, InvestigatoryAction.INFORMATIONAL})
NVSWITCH_FATAL = "nvswitch_fatal"
NVSWITCH_NON_FATAL = "nvswitch_non_fatal"
_RECOVERY = re.compile(
    r"recovery action changed from .{0,80}? to (?P<code>0x[0-9a-fA-F]{1,8})(?: \((?P<name>[^)]{0,64})\))?")


@dataclass(frozen=True, slots=True)
class CodeFacts:
    """One code of an incident as the decisive choice reads it."""

    code: str  # its display string: "Xid 48", "SXid 12028", "fallen off the bus", "AER"
    immediate_action: str | None = None  # NVIDIA's, from the catalog
    message: str | None = None  # the driver's own line (Xid 154's names the recovery action)


@dataclass(frozen=True, slots=True)
class Recovery:
    """The recovery action an Xid 154 line names: NVML's name and the driver's words."""

    name: str  # GPU_RESET, NODE_REBOOT, ... (`models.catalog.RECOVERY_ACTIONS`)
    text: str  # "GPU Reset Required"


@dataclass(frozen=True, slots=True)
class Decisive:
    code: str | None  # the decisive code's display string; None for an incident without codes
    key: str | None  # its runbook entry (an `ImmediateAction` value or a class key); None: no catalog action
    action: str | None  # NVIDIA's action for it as the catalog or the driver names it
    recovery: Recovery | None  # the latest Xid 154 recovery action of the incident, when one names it
    reason: str

    def codes_first(self, codes: Sequence[str]) -> list[str]:
        """`codes` with the decisive one first, the others in their order."""
        return [c for c in codes if c == self.code] + [c for c in codes if c != self.code]


def recovery_of(message: str | None) -> Recovery | None:
    """The recovery action an Xid 154 line names ("... to 0x2 (Node Reboot Required)")."""
    m = _RECOVERY.search(message or "")
    if m is None:
        return None
    name = RECOVERY_ACTIONS.get(int(m["code"], 16))
    if name is None:
        return None
    return Recovery(name, (m["name"] or "").strip() or name.replace("_", " ").lower())


def code_key(c: CodeFacts, catalog: Catalog) -> tuple[str | None, str | None]:
    """(the runbook entry that ranks code `c`, NVIDIA's action for it as shown)."""
    parsed = stored_code(c.code)
    if parsed is None:
        return None, None
    if parsed.kind is CodeKind.SXID:
        info = catalog.sxid(parsed.number)
        if info is None:
            return None, None
        return (NVSWITCH_FATAL, "fatal SXid") if info.fatal else (NVSWITCH_NON_FATAL, "non-fatal SXid")
    if parsed.number == 154:
        rec = recovery_of(c.message)
        if rec is not None:
            return RECOVERY_KEYS.get(rec.name, ImmediateAction.XID_154), f"{ImmediateAction.XID_154}: {rec.text}"
    action = c.immediate_action or None
    return action, action


def decisive(codes: Sequence[CodeFacts], order: Sequence[str], catalog: Catalog | None = None) -> Decisive:
    """The incident's decisive code and NVIDIA's action for it: the code whose runbook key comes first in
    `order` (the runbook's), the first listed on a tie; without any keyed code, the first numbered code."""
    cat = catalog or load_catalog()
    rank = {k: i for i, k in enumerate(order)}
    recovery = next((r for c in reversed(codes) if stored_code(c.code) == _XID_154 and (r := recovery_of(c.message))),
                    None)
    keyed = [(_follows_other(c, cat), rank.get(k, len(rank)), i, c, k, a) for i, c in enumerate(codes)
             for k, a in [code_key(c, cat)] if k is not None]
    if keyed:
        _, _, _, best, key, action = min(keyed, key=lambda t: (t[0], t[1], t[2]))
        others = [c.code for c in codes if c is not best]
        why = (f"{best.code} ({action or key}) ranks first in the runbook's order"
               + (f" among {', '.join(others)}" if others else ""))
        return Decisive(best.code, key, action, recovery, why)
    numbered = next((c for c in codes if stored_code(c.code) is not None), None)
    first = numbered or (codes[0] if codes else None)
    if first is None:
        return Decisive(None, None, None, None, "the incident has no codes")
    return Decisive(first.code, None, first.immediate_action, recovery,
                    f"no code of the incident has a catalog action; {first.code} is its first")


def _follows_other(c: CodeFacts, catalog: Catalog) -> bool:
    """Whether NVIDIA says the code reports on another Xid (`FOLLOWS_OTHER_XID`)."""
    parsed = stored_code(c.code)
    if parsed is None or parsed.kind is not CodeKind.XID:
        return False
    info = catalog.xid(parsed.number)
    return info is not None and info.investigatory_action in FOLLOWS_OTHER_XID


_XID_154 = stored_code("Xid 154")
