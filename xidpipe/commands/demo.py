"""`xidpipe demo`: the whole pipeline on the bundled sample cluster, with embedded defaults."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path
from typing import Any

from models.account import Account, Decision, action_text, headline
from models.node_records import NodeRecord
from models.scan import scan
from models.vocabulary import ComponentKind
from xidpipe.commands.exits import EXIT_OK, Unavailable
from xidpipe.commands.scan import collect, print_table
from xidpipe.replay.layout import STATE_FILE, read_state

SAMPLE_YEAR = 2026


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run the whole pipeline on the bundled sample cluster",
        description="Start a local Kafka (unless XIDPIPE_DEMO_KAFKA is set), the stream worker, one node "
        "agent per sample node replaying its kernel log, and the responder with embedded defaults "
        "(dry-run cordon, Jira, Slack, PagerDuty and CloudEvents outboxes under var/outbox). Waits until "
        "everything is processed, "
        "prints the incidents with their attribution, classification and actions, and exits. "
        "Re-creates var/xidpipe.db and var/outbox.",
    )
    p.add_argument("--scan-only", action="store_true",
                   help="only run `xidpipe scan` over the sample logs and their recorded state (no Kafka, no worker)")
    p.add_argument("--timeout", type=float, default=110.0, help="give up after this many seconds (default 110)")
    p.set_defaults(func=run)


def sample_files() -> list[str]:
    root = resources.files("xidpipe").joinpath("samples", "cluster")
    return sorted(str(p) for p in root.iterdir() if p.name.endswith(".log"))


def sample_state() -> list[NodeRecord]:
    return read_state(Path(str(resources.files("xidpipe").joinpath("samples", "cluster", STATE_FILE))))


def run(args: argparse.Namespace) -> int:
    if args.scan_only:
        incidents = scan(collect(sample_files(), None, SAMPLE_YEAR), state=sample_state())
        print_table(incidents)
        return EXIT_OK
    from xidpipe.demo import DB, OUTBOX, run_demo

    def say(text: str) -> None:
        print(f"· {text}", flush=True)

    try:
        result = run_demo(say, timeout=args.timeout)
    except (TimeoutError, RuntimeError, OSError) as exc:
        raise Unavailable(str(exc)) from None
    print_incidents(result["incidents"], result["accounts"])
    print_decisions(result["incidents"], result["accounts"])
    print(f"\nTickets and chat messages (outbox): {OUTBOX}/jira, {OUTBOX}/slack")
    print(f"Pages (outbox): {OUTBOX}/pagerduty, {OUTBOX}/cloudevents")
    print(f"Incident history: {DB} (sqlite); the pipeline took {result['seconds']:.0f} s")
    return EXIT_OK


def print_incidents(incidents: list[dict[str, Any]], accounts: dict[str, Account | None] | None = None) -> None:
    rows = sorted(incidents, key=lambda i: (i["node"], i["first_seen"] or "", i["family"]))
    print(f"\n{len(rows)} incidents:\n")
    for n, i in enumerate(rows, 1):
        codes = ", ".join(str(c) for c in i.get("codes") or [])
        print(f"[{n}] {i['node']}  {i['family']}  {i['category'].upper()}  x{i['count']}  {codes}")
        print(f"    {_component(i)}")
        attribution = "   ".join(f"{what}: {', '.join(str(v) for v in values)}"
                                   for what, values in (("pods", i.get("pods")), ("processes", i.get("processes")))
                                   if values)
        if attribution:  # what is not known is left out
            print(f"    {attribution}")
        print(f"    why: {i['reason']}")
        account = (accounts or {}).get(i["incident_id"])
        action = action_text(account) if account is not None else i.get("immediate_action")
        if action:  # NVIDIA's action for the decisive code, as the ticket states it
            print(f"    NVIDIA: {action}")


def _component(i: dict[str, Any]) -> str:
    """What the incident is about: the workload, the NVSwitch, the node's driver, or the GPU."""
    kind = i.get("component") or ComponentKind.GPU
    if kind == ComponentKind.WORKLOAD:
        return f"workload {i.get('component_id')}"
    if kind == ComponentKind.NVSWITCH:
        return f"NVSwitch {i.get('component_id') or i.get('pci')}"
    if kind in (ComponentKind.NODE, ComponentKind.FLEET):
        return f"{kind} {i.get('component_id') or i['node']}"
    facts = [("GPU", i.get("gpu_uuid") or i.get("pci") or i.get("gpu")), ("serial", i.get("serial")),
             ("PCI", i.get("pci"))]
    return "  ".join(f"{what} {value}" for what, value in facts if value)


def print_decisions(incidents: list[dict[str, Any]], accounts: dict[str, Account | None]) -> None:
    """Each incident's cordon decision as its ticket and message state it (no cluster: dry runs)."""
    decided = sorted(((i, a) for i in incidents if (a := accounts.get(i["incident_id"])) is not None
                      and a.decision is not Decision.NOT_OFFERED),
                     key=lambda p: (p[0]["node"], p[0]["first_seen"] or ""))
    print(f"\nCordon decisions (no cluster configured: dry run): {len(decided)}")
    for i, a in decided:
        print(f"  {i['node']}: {headline(a)}: {a.reason}")
