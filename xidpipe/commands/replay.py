"""`xidpipe replay DIR`: a recorded cluster through the stream's engine, and what the policy would do."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from models.vocabulary import ComponentKind
from xidpipe.commands.exits import EXIT_FINDINGS as EXIT_INCIDENTS
from xidpipe.commands.exits import EXIT_OK as EXIT_CLEAN
from xidpipe.commands.exits import EXIT_USAGE as EXIT_INPUT_ERROR
from xidpipe.commands.options import config_parent

COMPONENT_NAMES: dict[str, str] = {ComponentKind.GPU: "GPU", ComponentKind.NVSWITCH: "NVSwitch",
                                   ComponentKind.NODE: "node", ComponentKind.WORKLOAD: "workload",
                                   ComponentKind.FLEET: "fleet"}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "replay", parents=[config_parent()],
        help="run a recorded cluster through the engine and show what the policy would do",
        description="Replay a recorded cluster (DIR: one <node>.log kernel log per node, in any format "
        "`xidpipe parse` reads, and state.jsonl with the nodes' inventories, pod assignments and processes; "
        "see docs/replay.md) through the stream worker's engine in one process, without Kafka. Prints the "
        "incidents, the cordon decisions of the policy (a dry run with the circuit breaker), the tickets and "
        "the chat messages. The stream's windows, thresholds and quiet periods are the worker's (`worker_policy` "
        "in the settings file, XIDPIPE_WORKER_POLICY__<NAME>), the cordon policy --policy or the responder's "
        "(`actions_policy_file`). Exit status: 0 no incident, 1 incidents found, 2 DIR or a file in it (or the "
        "settings or the policy) cannot be read.",
    )
    p.add_argument("dir", metavar="DIR", help="the recorded cluster")
    p.add_argument("--policy", dest="policy_file", metavar="FILE",
                   help="cordon policy YAML to decide with (default: the settings' actions_policy_file, else the "
                   "documented defaults)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--database-url", default=None,
                   help="an empty database to keep the history in (default: a temporary SQLite file)")
    p.add_argument("--cluster", default="replay", help="cluster name for fleet incidents and dossiers")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.cordon_policy import PolicyError
    from respond.cordon.policy_file import load_policy
    from respond.cordon.settings import ActionSettings
    from streams.settings import WorkerSettings
    from xidpipe.commands.startup import load
    from xidpipe.replay import ReplayInputError, run_replay

    pipeline = load(WorkerSettings).policy  # the worker's policy: the same file and variables it reads
    try:
        policy = load_policy(args.policy_file or load(ActionSettings).policy_file)
        result = run_replay(Path(args.dir), policy=policy, pipeline_policy=pipeline, database_url=args.database_url,
                            cluster_name=args.cluster)
    except (ReplayInputError, PolicyError) as exc:
        print(f"xidpipe replay: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    body = result.to_dict()
    if args.json:
        json.dump(body, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print_summary(body)
    return EXIT_INCIDENTS if body["incidents"] else EXIT_CLEAN


def print_summary(body: dict[str, Any], out: Any = None) -> None:
    out = out or sys.stdout
    stats = body["stats"]
    print(f"Replayed {stats['nodes']} nodes: {stats['lines_read']} kernel lines, {stats['lines_kept']} GPU-relevant, "
          f"in {stats['seconds']:.1f} s", file=out)
    incidents = body["incidents"]
    print(f"\n{len(incidents)} incidents:\n" if incidents else "\nNo incidents.", file=out)
    for n, i in enumerate(incidents, 1):
        what = i["component_id"] or i["gpu_uuid"] or i["pci"] or i["node"]
        print(f"[{n}] {i['node']}  {i['component']}  {i['family']}  {i['classification'].upper()}  x{i['count']}  "
              f"{', '.join(i['codes'])}", file=out)
        print(f"    {COMPONENT_NAMES.get(i['component'], i['component'])} {what}  PCI {i['pci'] or 'unknown'}  "
              f"{i['first_seen']} .. {i['last_seen']}", file=out)
        print(f"    pods: {', '.join(i['pods']) or 'unknown'}", file=out)
        print(f"    why: {i['reason']}", file=out)
    print(f"\nCordon decisions (dry run): {len(body['cordon_decisions'])}, cordons: {len(body['cordons'])}", file=out)
    for d in body["cordon_decisions"]:
        print(f"  {d['node']}: {d['outcome']} ({d['incident_id']}): {d['reason']}", file=out)
        r = d.get("remediation")
        if r is not None:
            off = "" if r["enabled"] else " (remediation is off in this policy)"
            print(f"    remediation{off}: {r['action']}: {r['reason']}", file=out)
            for step in r["plan"]:
                print(f"      {step}", file=out)
    if body["breaker"]["tripped"]:
        print(f"  breaker tripped at {body['breaker']['tripped_at']}: {body['breaker']['reason']}", file=out)
    print(f"\nTickets: {len(body['tickets'])}", file=out)
    for t in body["tickets"]:
        print(f"  {t['key']} ({t['priority']}): {t['summary']}", file=out)
    for u in body["ticket_updates"]:
        print(f"  {u['action']} {u['key']} for {u['incident_id']}: {u['reason']}", file=out)
    print(f"\nChat messages: {len(body['messages'])}", file=out)
    for m in body["messages"]:
        print(f"  {m['channel']}: {m['incident_id']} ({m['reason']})", file=out)
