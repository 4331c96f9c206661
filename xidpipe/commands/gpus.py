"""`xidpipe gpus list|history|rebuild`: the GPU asset ledger.

The ledger follows physical cards (by board serial, by UUID when a card has none) through swaps,
moves and RMA returns, from the inventories the node agents publish. `rebuild` fills it from the
inventories already stored (after an upgrade, or for a database written before the ledger existed).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from xidpipe.commands.incidents import add_database_options, history_session, print_table


def register(sub: Any) -> None:
    gpus: argparse.ArgumentParser = sub.add_parser("gpus", help="the GPU asset ledger: cards, placements, swaps",
                                                   description="Query the GPU asset ledger: which card is where, "
                                                   "and what happened to one card.")
    gsub = gpus.add_subparsers(dest="gpus_command", metavar="COMMAND", required=True)
    ls: argparse.ArgumentParser = gsub.add_parser("list", help="cards by node and PCI slot",
                                                  description="List the cards the ledger knows, by node and PCI "
                                                  "slot, with their incident counts.")
    ls.add_argument("--node")
    ls.add_argument("--model", help="a part of the model name, any case (h100)")
    ls.add_argument("--state", choices=("in_service", "missing", "retired"),
                    help="in_service; missing (its node's inventory no longer lists it); retired (another card "
                    "took its slot)")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--offset", type=int, default=0)
    add_database_options(ls)
    ls.set_defaults(func=run_list)
    hist: argparse.ArgumentParser = gsub.add_parser("history", help="one card: placements, swaps, incidents",
                                                    description="Show one card's placements over time, its ledger "
                                                    "events (swaps, moves, returns) and its incidents.")
    hist.add_argument("ident", metavar="SERIAL|UUID", help="board serial, any UUID the card had, or a card key")
    add_database_options(hist)
    hist.set_defaults(func=run_history)
    rb: argparse.ArgumentParser = gsub.add_parser("rebuild", help="fill the ledger from the stored inventories",
                                                  description="Apply the stored node inventories to the ledger "
                                                  "in time order (those newer than what it holds), or all of "
                                                  "them from an empty ledger with --reset.")
    rb.add_argument("--reset", action="store_true", help="empty the ledger first")
    add_database_options(rb)
    rb.set_defaults(func=run_rebuild)


def run_list(args: argparse.Namespace) -> int:
    from history.queries import GpuFilter, list_gpus

    with history_session(args) as s:
        rows, total = list_gpus(s, GpuFilter(node=args.node, model=args.model, state=args.state), limit=args.limit,
                                offset=args.offset)
        empty = total == 0 and not (args.node or args.model or args.state) and _has_inventories(s)
    if args.json:
        json.dump({"total": total, "offset": args.offset, "gpus": rows}, sys.stdout, indent=2)
        print()
        return 0
    if not rows:
        print("No GPUs match." + (" The ledger is empty but inventories are stored: run `xidpipe gpus rebuild`."
                                  if empty else ""))
        return 0
    header = ["NODE", "PCI SLOT", "SERIAL", "MODEL", "STATE", "SINCE", "INCIDENTS", "HARDWARE", "UUID"]
    table = [[r["node"], r["pci_slot"], r["serial"] or "-", r["model"] or "?", r["state"], str(r["since"])[:19],
              str(r["incidents"]), str(r["hardware_incidents"]), r["uuid"]] for r in rows]
    print_table(header, table)
    print(f"\n{len(rows)} of {total} (offset {args.offset})")
    return 0


def _has_inventories(s: Any) -> bool:
    import sqlalchemy as sa

    from history.tables import NodeState

    return s.scalar(sa.select(NodeState.id).where(NodeState.kind == "inventory").limit(1)) is not None


def run_history(args: argparse.Namespace) -> int:
    from history.queries import gpu_history

    with history_session(args) as s:
        data = gpu_history(s, args.ident)
    if data is None:
        print(f"xidpipe gpus history: no card {args.ident!r} in the ledger (a serial, a UUID or a card key)",
              file=sys.stderr)
        return 1
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
        return 0
    print(f"{data['card']}  {data['model'] or '?'}  {data['state']}  on {data['node']} {data['pci_slot']} "
          f"since {data['since']}")
    print(f"serial {data['serial'] or '-'}, UUID {data['uuid']}, first seen {data['first_seen']}, last seen "
          f"{data['last_seen']}" + (f", missing since {data['missing_since']}" if data["missing_since"] else ""))
    print("\nPlacements:")
    print_table(["FROM", "TO", "NODE", "PCI SLOT", "UUID", "DRIVER", "VBIOS", "MIG"],
                [[p["valid_from"][:19], (p["valid_to"] or "now")[:19], p["node"], p["pci_slot"], p["uuid"],
                  p["driver"] or "?", p["vbios"] or "?", ", ".join(p["mig_layout"]) or "-"]
                 for p in data["placements"]])
    print("\nLedger events:")
    for e in data["events"]:
        print(f"- {e['at'][:19]} {e['kind']}: {e['reason']}")
    print("\nIncidents:")
    if not data["incidents"]:
        print("(none)")
    for i in data["incidents"]:
        print(f"- {str(i['first_seen'])[:19]} … {str(i['last_seen'])[:19]} {i['node']} {i['family']} "
              f"{i['category']} ×{i['count']} {i['lifecycle']} {i['incident_id']}")
    return 0


def run_rebuild(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    from history.ledger_store import rebuild_ledger
    from history.tables import GpuCard, GpuLedgerEvent

    with history_session(args) as s:
        applied = rebuild_ledger(s, reset=args.reset)
        s.commit()
        cards = s.scalar(sa.select(sa.func.count()).select_from(GpuCard)) or 0
        events = s.scalar(sa.select(sa.func.count()).select_from(GpuLedgerEvent)) or 0
    if args.json:
        json.dump({"inventories_applied": applied, "cards": cards, "events": events}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{applied} inventories applied; the ledger holds {cards} cards and {events} events")
    return 0
