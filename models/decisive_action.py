"""An incident's NVIDIA action: the most severe of its codes' immediate actions.

An incident carries several codes (a GPU that failed jobs with Xid 13, then reported the contained
error Xid 94, the double-bit error Xid 48 and the row remapping Xid 63): NVIDIA's action for it is
the most severe of its codes' actions in NVIDIA's catalog, not the first code's. Severity is the
runbook's `order` (`models/catalog/runbook.yaml`, the most drastic first), the one order of NVIDIA's
actions: the runbook's primary entry and the decisive code follow it too.

- `decisive_action`: the decisive code (the first listed on a tie) and its action, with the reason;
  codes without an action in the catalog (an SXid, Xid 171/172, "fallen off the bus") are never
  decisive while another code has one, and neither are the codes NVIDIA says follow another Xid
  (`FOLLOWS_OTHER_XID`: Xid 45, "Not Solo: IGNORE (follow other Xid)"; Xid 154, "Informational only
  regarding another Xid ... always expected to be seen with another Xid requiring a recovery
  action", whose recovery the incident keeps apart as NVIDIA's current instruction).
- `action_rank`: an action's place in that order (0: the most drastic).

Pure: the catalog and the runbook are bundled data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from models.catalog import Catalog, XidInfo, load_catalog
from models.runbook import load_runbook
from models.vocabulary import CodeKind, FaultCode, ImmediateAction, InvestigatoryAction, code_text, stored_code

# Investigatory actions of codes that report on another Xid: decisive only when no other code has an action.
FOLLOWS_OTHER_XID = frozenset({InvestigatoryAction.RESTART_FM_WHEN_SOLO, InvestigatoryAction.INFORMATIONAL})


@dataclass(frozen=True, slots=True)
class DecisiveAction:
    """The code that decides an incident's NVIDIA action, the action, and the catalog row behind it."""

    code: FaultCode
    action: ImmediateAction
    info: XidInfo
    reason: str


def action_order() -> tuple[str, ...]:
    """NVIDIA's actions (and the runbook's class entries), the most drastic first."""
    return load_runbook().order


def action_rank(action: str, order: Sequence[str] | None = None) -> int:
    """The action's place in the runbook's order (0: the most drastic); an action outside it ranks last."""
    ranked = order if order is not None else action_order()
    return ranked.index(action) if action in ranked else len(ranked)


def decisive_action(codes: Iterable[FaultCode], catalog: Catalog | None = None,
                    order: Sequence[str] | None = None) -> DecisiveAction | None:
    """The code among `codes` whose catalog action is the most drastic, and that action; the code listed
    first on a tie; None when no code has an action in the catalog."""
    cat = catalog or load_catalog()
    ranked = order if order is not None else action_order()
    best: tuple[tuple[bool, int], FaultCode, XidInfo, ImmediateAction] | None = None
    seen: list[FaultCode] = []
    for code in codes:
        if code in seen:
            continue
        seen.append(code)
        info = cat.xid(code.number) if code.kind is CodeKind.XID else None
        if info is None or info.immediate_action is None:
            continue
        rank = (info.investigatory_action in FOLLOWS_OTHER_XID, action_rank(info.immediate_action, ranked))
        if best is None or rank < best[0]:
            best = (rank, code, info, info.immediate_action)
    if best is None:
        return None
    _, code, info, action = best
    others = [code_text(c) for c in seen if c != code]
    reason = f"{code_text(code)} ({action}) is the most drastic of NVIDIA's actions" + (
        f" among {', '.join(others)}" if others else "")
    return DecisiveAction(code, action, info, reason)


def decisive_of_stored(codes: Iterable[str], catalog: Catalog | None = None) -> DecisiveAction | None:
    """`decisive_action` of an incident's stored codes ("Xid 48", "AER", ...), in the order it saw them."""
    return decisive_action((c for text in codes if (c := stored_code(str(text))) is not None), catalog)
