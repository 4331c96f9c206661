"""`xidpipe gpus list|history|rebuild`: the GPU asset ledger.

The ledger follows physical cards (by board serial, by UUID when a card has none) through swaps,
moves and RMA returns, from the inventories the node agents publish. A card's STATUS says whether it
can be trusted with work: `faulted` (an incident of its own is open), `rma`, `cordoned` or
`cordon-dry-run` (its node's cordon by xidpipe), after its ledger state when that is not
`in_service` (`models.gpu_status`); `ok` otherwise. `rebuild` fills the ledger from the inventories
already stored (after an upgrade, or for a database written before the ledger existed).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from xidpipe.commands import output
from xidpipe.commands.exits import EXIT_OK, UsageError
from xidpipe.commands.incidents import history_session, print_data, resolve
from xidpipe.commands.layout import Column, print_table
from xidpipe.commands.options import add_enum, history_parents, node_name, output_format
from xidpipe.commands.timeflags import format_age, format_time

STATES = ("in_service", "missing", "retired", "conflict")


def register(sub: Any) -> None:
    gpus: argparse.ArgumentParser = sub.add_parser("gpus", help="the GPU asset ledger: cards, placements, swaps",
                                                   description="Query the GPU asset ledger: which card is where, "
                                                   "and what happened to one card.",
                                                   parents=history_parents())
    gsub = gpus.add_subparsers(dest="gpus_command", metavar="COMMAND", required=True)
    ls: argparse.ArgumentParser = gsub.add_parser("list", help="cards by node and PCI slot",
                                                  description="List the cards the ledger knows, by node and PCI "
                                                  "slot, with their incident counts and the DeviceTaintRule that "
                                                  "quarantines a card now (QUARANTINE).",
                                                  parents=history_parents())
    ls.add_argument("--node", type=node_name)
    ls.add_argument("--model", help="a part of the model name, any case (h100)")
    add_enum(ls, "--state", "state", STATES, "in_service; missing (its node's inventory no longer lists it); "
             "retired (another card took its slot); conflict (another node lists it too: it stays where it is "
             "until its node stops listing it)")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--offset", type=int, default=0)
    ls.set_defaults(func=run_list)
    hist: argparse.ArgumentParser = gsub.add_parser("history", help="one card: placements, swaps, incidents",
                                                    description="Show one card's placements over time, its ledger "
                                                    "events (swaps, moves, returns) and its incidents.",
                                                    parents=history_parents())
    hist.add_argument("ident", metavar="SERIAL|UUID", help="board serial, any UUID the card had, or a card key, "
                      "or a unique prefix of one (GPU-5f1c)")
    hist.set_defaults(func=run_history)
    rb: argparse.ArgumentParser = gsub.add_parser("rebuild", help="fill the ledger from the stored inventories",
                                                  description="Apply the stored node inventories to the ledger "
                                                  "in time order (those newer than what it holds), or all of "
                                                  "them from an empty ledger with --reset.",
                                                  parents=history_parents())
    rb.add_argument("--reset", action="store_true", help="empty the ledger first")
    rb.set_defaults(func=run_rebuild)


LIST_COLUMNS = (
    Column("NODE"), Column("PCI SLOT"), Column("SERIAL"), Column("MODEL", free=True, min_width=10, drop=2),
    Column("STATUS"), Column("INCIDENTS", drop=1), Column("HARDWARE", drop=3), Column("AGE"),
    Column("STATE", wide=True), Column("VBIOS", wide=True), Column("SINCE (UTC)", wide=True),
    Column("UUID", wide=True), Column("QUARANTINE", wide=True), Column("WHY", free=True, wide=True),
)


def run_list(args: argparse.Namespace) -> int:
    from history.queries import GpuFilter, list_gpus

    fmt = output_format(args)
    with history_session(args) as s:
        rows, total = list_gpus(s, GpuFilter(node=args.node, model=args.model, state=args.state), limit=args.limit,
                                offset=args.offset)
        empty = total == 0 and not (args.node or args.model or args.state) and _has_inventories(s)
    if fmt in ("json", "yaml"):
        return print_data({"total": total, "offset": args.offset, "gpus": rows}, fmt)
    if not rows:
        print("No GPUs match." + (" The ledger is empty but inventories are stored: run `xidpipe gpus rebuild`."
                                  if empty else ""))
        return EXIT_OK
    now = datetime.now(UTC)
    print_table(LIST_COLUMNS, [[r["node"], r["pci_slot"], r["serial"], r["model"] or "?", r["status"], r["incidents"],
                                r["hardware_incidents"], format_age(r["since"], now), _state(r),
                                _vbios(r["vbios"], r["vbios_from"]), format_time(r["since"]), r["uuid"], _quarantine(r),
                                r["status_reason"]] for r in rows], wide=fmt == "wide")
    print(f"\n{len(rows)} of {total} (offset {args.offset})")
    return EXIT_OK


def _state(card: dict[str, Any]) -> str:
    """A card's state, with the node that claims it when in conflict."""
    return f"{card['state']}: claimed by {card['claimed_by']}" if card.get("claimed_by") else str(card["state"])


def _vbios(version: str | None, source: str | None) -> str:
    """The VBIOS, marked when it was read from a fault's evidence rather than the inventory."""
    if not version:
        return "?"
    return f"{version} (evidence)" if source == "evidence" else version


def _quarantine(card: dict[str, Any]) -> str:
    """The DeviceTaintRule that quarantines the card now, with its effect; `-` when none does."""
    q = card.get("quarantine")
    if not q:
        return "-"
    return f"{q['rule']} ({'dry run' if q.get('dry_run') else q.get('effect')})"


def _has_inventories(s: Any) -> bool:
    import sqlalchemy as sa

    from history.tables import NodeState

    return s.scalar(sa.select(NodeState.id).where(NodeState.kind == "inventory").limit(1)) is not None


def run_history(args: argparse.Namespace) -> int:
    from history.queries import gpu_history, resolve_card, short_ids

    fmt = output_format(args)
    with history_session(args) as s:
        data = gpu_history(s, resolve(resolve_card, s, args.ident))
        short = short_ids(s, [i["incident_id"] for i in data["incidents"]]) if data is not None else {}
    if data is None:  # the card went between the two reads
        raise UsageError(f"no card {args.ident!r} in the ledger")
    if fmt in ("json", "yaml"):
        return print_data(data, fmt)
    print(f"{data['card']}  {data['model'] or '?'}  {_state(data)}  on {data['node']} {data['pci_slot']} "
          f"since {format_time(data['since'])}")
    print(f"serial {data['serial'] or '-'}, UUID {data['uuid']}, first seen {format_time(data['first_seen'])}, "
          f"last seen {format_time(data['last_seen'])}"
          + (f", missing since {format_time(data['missing_since'])}" if data["missing_since"] else ""))
    print(f"status {data['status']}: {data['status_reason']}")
    output.heading("Placements")
    print_table((Column("FROM"), Column("TO"), Column("NODE"), Column("PCI SLOT"), Column("UUID"), Column("DRIVER"),
                 Column("VBIOS"), Column("MIG", free=True)),
                [[format_time(p["valid_from"]), format_time(p["valid_to"]) if p["valid_to"] else "now", p["node"],
                  p["pci_slot"], p["uuid"], p["driver"] or "?", _vbios(p["vbios"], p.get("vbios_from")),
                  ", ".join(p["mig_layout"])] for p in data["placements"]])
    output.heading("Ledger events")
    print_table((Column("AT"), Column("KIND"), Column("REASON", free=True)),
                [[format_time(e["at"]), e["kind"], e["reason"]] for e in data["events"]])
    output.heading("Incidents")
    if not data["incidents"]:
        print("(none)")
        return EXIT_OK
    now = datetime.now(UTC)
    print_table((Column("ID"), Column("NODE"), Column("FAMILY"), Column("CATEGORY"), Column("COUNT"),
                 Column("LIFECYCLE"), Column("FIRST SEEN (UTC)", drop=2), Column("LAST SEEN (UTC)", drop=1),
                 Column("AGE")),
                [[short[i["incident_id"]], i["node"], i["family"], i["category"], i["count"],
                  "merged" if i.get("merged_into") else i["lifecycle"], format_time(i["first_seen"]),
                  format_time(i["last_seen"]), format_age(i["first_seen"], now)] for i in data["incidents"]])
    return EXIT_OK


def run_rebuild(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    from history.ledger_store import rebuild_ledger
    from history.tables import GpuCard, GpuLedgerEvent

    with history_session(args) as s:
        applied = rebuild_ledger(s, reset=args.reset)
        s.commit()
        cards = s.scalar(sa.select(sa.func.count()).select_from(GpuCard)) or 0
        events = s.scalar(sa.select(sa.func.count()).select_from(GpuLedgerEvent)) or 0
    fmt = output_format(args)
    if fmt in ("json", "yaml"):
        return print_data({"inventories_applied": applied, "cards": cards, "events": events}, fmt)
    print(f"{applied} inventories applied; the ledger holds {cards} cards and {events} events")
    return EXIT_OK
