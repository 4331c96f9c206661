"""`xidpipe policy check FILE` and `xidpipe policy test ...`: validate a cordon policy, and ask it
what it would decide for a fault on a node, without touching a cluster.

`policy test` runs the responder's own decision (`models.cordon.decide_cordon`) on a request built
from the options, with the incident's occurrence times (`--at`, or `--occurrences N --within S`) as
the responder reads them from the history, so "would two contained-ECC faults a day apart cordon?"
has the answer the responder would give."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from models.vocabulary import Category, Family, ImmediateAction, values
from xidpipe.commands.exits import EXIT_OK, EXIT_USAGE, UsageError
from xidpipe.commands.options import json_parent, node_name
from xidpipe.commands.output import enum_arg
from xidpipe.commands.timeflags import parse_time

EXIT_INVALID = EXIT_USAGE


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "policy", help="validate the cordon policy and test its decisions",
        description="Validate a cordon policy file, or show the decision (and its reason) it makes for a fault.",
    )
    psub = p.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", required=True)

    check = psub.add_parser("check", help="validate a policy file", parents=[json_parent()],
                            description="Validate a cordon policy file. Exit status 0 when valid; 2 with a "
                            "message naming each offending field otherwise. --json prints the full policy, "
                            "defaults filled in.")
    check.add_argument("file", metavar="FILE", help="policy YAML")
    check.set_defaults(func=run_check)

    test = psub.add_parser(
        "test", help="show the cordon decision for a fault on a node",
        description="Decide whether a fault on a node would be cordoned, and why, from the policy and what "
        "you state about the node and the fleet. Touches no cluster. Prints JSON; exit status 0 whatever the "
        "decision, 2 for a bad policy or option.")
    test.add_argument("--policy", dest="policy_file", help="policy YAML (default: the documented defaults)")
    fault = test.add_argument_group("the fault")
    fault.add_argument("--xid", type=int, action="append", default=[], help="Xid code (repeatable)")
    fault.add_argument("--family", type=enum_arg("family", values(Family)), help="fault family (default: from the Xid)")
    fault.add_argument("--category", type=enum_arg("category", values(Category)),
                       help="category, e.g. suspected_hardware (default: from the Xid catalog)")
    fault.add_argument("--action", dest="actions", action="append", default=[],
                       type=enum_arg("action", values(ImmediateAction)),
                       help="NVIDIA immediate action (default: from the Xid catalog; repeatable)")
    fault.add_argument("--at", dest="times", action="append", default=[], metavar="TIME",
                       help="when an occurrence of the incident happened: ISO 8601, a date, or 2h for two hours ago "
                       "(repeatable: one per occurrence)")
    fault.add_argument("--occurrences", type=int, metavar="N",
                       help="N occurrences, evenly spread over --within seconds up to now")
    fault.add_argument("--within", type=float, default=0.0, metavar="S",
                       help="seconds from the first to the last of --occurrences (default 0)")
    fault.add_argument("--count", type=int, default=1,
                       help="occurrences of the incident, when no times are given (default 1)")
    fault.add_argument("--span-s", type=float, default=0.0,
                       help="with --count: seconds from the first to the last occurrence (default 0)")
    fault.add_argument("--incident", default="policy-test", help="incident id (default policy-test)")
    node = test.add_argument_group("the node")
    node.add_argument("--node", required=True, type=node_name, help="node name")
    node.add_argument("--labels", nargs="*", default=[], metavar="KEY=VALUE", help="node labels")
    node.add_argument("--unschedulable", action="store_true", help="the node is already cordoned (by someone)")
    node.add_argument("--cordoned-by-xidpipe", metavar="INCIDENT",
                      help="the node is cordoned by xidpipe for this incident")
    node.add_argument("--gpu", default="", metavar="UUID", help="the faulty GPU's UUID (quarantine_gpu rules)")
    node.add_argument("--device", metavar="NAME", help="the GPU is this device of the node's ResourceSlice "
                      "(gpu-3); without it a quarantine_gpu rule finds no DRA device and cordons the node")
    fleet = test.add_argument_group("the fleet")
    fleet.add_argument("--pool-nodes", type=int, default=100, help="nodes in the node's pool (default 100)")
    fleet.add_argument("--pool-cordoned", type=int, default=0, help="of which cordoned by xidpipe (default 0)")
    fleet.add_argument("--cordons-last-hour", type=int, default=0, help="cordons by xidpipe in the last hour")
    fleet.add_argument("--breaker-tripped", action="store_true", help="the circuit breaker is tripped")
    fleet.add_argument("--pool-gpus", type=int, default=800, help="GPUs of the pool's nodes (default 800)")
    fleet.add_argument("--pool-gpus-quarantined", type=int, default=0, help="of which quarantined by xidpipe")
    test.set_defaults(func=run_test)


def run_check(args: argparse.Namespace) -> int:
    from models.cordon_policy import PolicyError
    from respond.cordon.policy_file import load_policy

    try:
        policy = load_policy(args.file)
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        print(policy.model_dump_json(indent=2))
        return EXIT_OK
    b = policy.breaker
    print(f"{args.file}: valid cordon policy: {len(policy.rules)} rules "
          f"({', '.join(f'{r.name}={r.action}' for r in policy.rules)}); breaker {b.max_pool_share:.0%} of a pool "
          f"(at least {b.min_nodes}), {b.max_per_hour} per hour; drain {'on' if policy.drain.enabled else 'off'}"
          f"{'; DRY RUN' if policy.dry_run else ''}")
    return EXIT_OK


def _parse_labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--labels expects KEY=VALUE, got {item!r}")
        labels[key] = value
    return labels


def derive_fault(xids: list[int]) -> tuple[Family, Category, list[ImmediateAction]]:
    """(family, category, NVIDIA immediate actions) of Xids, from the bundled catalog."""
    from models.catalog import load_catalog
    from models.families import family_of
    from models.kernlog.record import FaultRecord

    catalog = load_catalog()
    family, category, actions = Family.OTHER, Category.UNKNOWN, []
    for code in xids:
        info = catalog.xid(code)
        cat = info.category if info else Category.UNKNOWN
        if info and info.immediate_action:
            actions.append(info.immediate_action)
        if (family, category) == (Family.OTHER, Category.UNKNOWN):
            family = family_of(FaultRecord(line=0, kind="xid", raw="", message="", xid=code, category=cat))
            category = cat
    return family, category, actions


def occurrence_times(args: argparse.Namespace, now: datetime) -> tuple[datetime, ...]:
    """The occurrence times the options state (`--at`, or `--occurrences N --within S`), oldest first."""
    if args.times and args.occurrences is not None:
        raise UsageError("give either --at times or --occurrences, not both")
    times = []
    for text in args.times:
        try:
            times.append(parse_time(text, now))
        except ValueError as exc:
            raise UsageError(f"--at: {exc}") from None
    if args.occurrences is not None:
        n = args.occurrences
        if n < 1 or args.within < 0:
            raise UsageError("--occurrences needs N >= 1 and --within S >= 0")
        step = args.within / (n - 1) if n > 1 else 0.0
        times = [now - timedelta(seconds=args.within - i * step) for i in range(n)]
    return tuple(sorted(times))


def run_test(args: argparse.Namespace) -> int:
    from models.cordon import (
        ANN_CORDONED_AT,
        ANN_INCIDENT,
        ANN_OCCURRENCES,
        BreakerState,
        CordonRequest,
        FleetView,
        NodeView,
        decide_cordon,
        pool_of,
    )
    from models.cordon_policy import PolicyError
    from models.quarantine import DeviceRef, GpuView
    from respond.cordon.policy_file import load_policy

    try:
        policy = load_policy(args.policy_file)
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INVALID
    family, category, actions = derive_fault(args.xid)
    now = datetime.now(UTC)
    times = occurrence_times(args, now)
    last = times[-1] if times else now
    first = times[0] if times else last - timedelta(seconds=args.span_s)
    req = CordonRequest(
        node=args.node, incident_id=args.incident, family=Family(args.family) if args.family else family,
        xids=tuple(args.xid), category=Category(args.category) if args.category else category,
        immediate_actions=tuple(ImmediateAction(a) for a in args.actions) or tuple(actions),
        count=len(times) or args.count, first_seen=first, last_seen=last, occurrences=times, gpu=args.gpu,
    )
    labels = _parse_labels(args.labels)
    annotations = {}
    if args.cordoned_by_xidpipe:
        annotations = {ANN_CORDONED_AT: last.isoformat(), ANN_INCIDENT: args.cordoned_by_xidpipe,
                       ANN_OCCURRENCES: str(args.count)}
    node = NodeView(name=args.node, labels=labels, annotations=annotations,
                    unschedulable=args.unschedulable or bool(args.cordoned_by_xidpipe))
    fleet = FleetView(pool=pool_of(policy, labels), pool_nodes=args.pool_nodes,
                      pool_cordoned_by_xidpipe=args.pool_cordoned, cordons_last_hour=args.cordons_last_hour,
                      pool_gpus=args.pool_gpus, pool_gpus_quarantined=args.pool_gpus_quarantined)
    gpu = GpuView(uuid=args.gpu, unresolved="no --device given: the GPU is no DRA device here")
    if args.device:
        gpu = GpuView(uuid=args.gpu, device=DeviceRef(driver=policy.quarantine.driver, pool=args.node,
                                                       device=args.device))
    breaker = BreakerState(tripped=True, reason="stated on the command line") if args.breaker_tripped \
        else BreakerState()
    decision = decide_cordon(req, node, fleet, breaker, policy, gpu=gpu)
    out = {"cordon": decision.changes_node, "quarantine": decision.outcome == "quarantine",
           **decision.model_dump(mode="json"),
           "request": req.model_dump(mode="json", include={"node", "family", "xids", "category",
                                                           "immediate_actions", "count", "occurrences"})}
    print(json.dumps(out, indent=2))
    return EXIT_OK
