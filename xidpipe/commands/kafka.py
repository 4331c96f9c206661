"""`xidpipe kafka acls plan|apply`: the ACLs each xidpipe principal needs (`models.kafka_grants`), on a
production cluster, as an admin principal (`KafkaAdminSettings`).

`plan` lists every grant with its reason and whether the cluster holds it, and the principals' other
ACLs (never removed); `apply` creates the missing ones, so it may run at every install or upgrade.
Exit status 0, or 3 when the cluster cannot be reached or refuses (the principal may not manage ACLs).
"""

from __future__ import annotations

import argparse
from typing import Any

from xidpipe.commands.exits import EXIT_OK, Unavailable

_FLAGS = ("topic_prefix", "agent_principal", "worker_principal", "responder_principal", "worker_group",
          "responder_group", "bootstrap_servers")


def register(sub: Any) -> None:
    kafka: argparse.ArgumentParser = sub.add_parser(
        "kafka", help="Kafka administration: the principals' ACLs",
        description="Kafka administration for a production cluster (docs/kafka.md, deploy/README.md).")
    ksub = kafka.add_subparsers(dest="kafka_command", metavar="COMMAND", required=True)
    acls: argparse.ArgumentParser = ksub.add_parser(
        "acls", help="the ACLs of the agent, worker and responder principals",
        description="The ACLs each xidpipe principal needs, each with its reason (models/kafka_grants.py), as the "
        "principal of $XIDPIPE_KAFKA_ADMIN_SASL_USERNAME (and the other XIDPIPE_KAFKA_ADMIN_ settings).")
    asub = acls.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    for action, text in (("plan", "show each grant, its reason and whether the cluster holds it (changes nothing)"),
                         ("apply", "create the grants the cluster does not hold (idempotent)")):
        p: argparse.ArgumentParser = asub.add_parser(action, help=text, description=text)
        p.add_argument("--bootstrap-servers", help="default $XIDPIPE_BOOTSTRAP_SERVERS")
        p.add_argument("--topic-prefix", help="default $XIDPIPE_TOPIC_PREFIX")
        for who in ("agent", "worker", "responder"):
            p.add_argument(f"--{who}-principal", help=f"the {who}s' SCRAM user (default {who})")
        p.add_argument("--worker-group", help="the workers' consumer group (default xidpipe-worker)")
        p.add_argument("--responder-group", help="the responders' consumer group (default xidpipe-responder)")
        p.add_argument("--agent-read-back", action="store_true", default=None,
                       help="grant the agents READ on the node topics for their read-back after a crash "
                       "(every agent may then read every node's records)")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.kafka_grants import pipeline_grants
    from xidpipe import kafka_acls
    from xidpipe.commands.kafka_settings import KafkaAdminSettings
    from xidpipe.commands.startup import load

    flags = {k: getattr(args, k) for k in (*_FLAGS, "agent_read_back") if getattr(args, k, None) is not None}
    settings = load(KafkaAdminSettings, **flags)
    grants = pipeline_grants(topic_prefix=settings.topic_prefix, agent=settings.agent_principal,
                             worker=settings.worker_principal, worker_group=settings.worker_group,
                             responder=settings.responder_principal, responder_group=settings.responder_group,
                             agent_read_back=settings.agent_read_back)
    options = settings.kafka_python_options()
    try:
        if args.acls_command == "apply":
            plan, created = kafka_acls.apply(settings.bootstrap_servers, options, grants)
        else:
            plan, created = kafka_acls.plan(settings.bootstrap_servers, options, grants), None
    except Exception as exc:  # kafka-python's errors, refusals and unreachable brokers: one line, status 3
        raise Unavailable(f"Kafka at {settings.bootstrap_servers} as {settings.sasl_username or 'anonymous'}: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    _print(plan, created, settings, args.json)
    return EXIT_OK


def _print(plan: Any, created: list[Any] | None, settings: Any, as_json: bool) -> None:
    import json

    missing = {g.key for g in plan.missing}
    done = {g.key for g in created or ()}
    rows = [{"principal": g.principal, "operation": g.operation, "resource": g.resource, "name": g.name,
             "pattern": g.pattern, "reason": g.reason, "present": g.key not in missing or g.key in done}
            for g in plan.wanted]
    extra = [dict(zip(("principal", "operation", "resource", "name", "pattern"), k, strict=True)) for k in plan.extra]
    if as_json:
        out: dict[str, Any] = {"bootstrap_servers": settings.bootstrap_servers, "grants": rows,
                               "missing": len(missing - done), "extra": extra}
        if created is not None:
            out["created"] = len(created)
        print(json.dumps(out, indent=2))
        return
    from xidpipe.commands import output

    output.table(["PRINCIPAL", "OPERATION", "RESOURCE", "NAME", "PATTERN", "HELD", "REASON"],
                 [[r["principal"], r["operation"], r["resource"], r["name"], r["pattern"],
                   "yes" if r["present"] else "MISSING", r["reason"]] for r in rows])
    if extra:
        print(f"\n{len(extra)} other ACLs of these principals (kept): "
              + "; ".join(f"{e['principal']} {e['operation']} {e['resource']} {e['name']}" for e in extra))
    if created is None:
        print(f"\n{len(missing)} of {len(rows)} grants missing; `xidpipe kafka acls apply` creates them" if missing
              else f"\nall {len(rows)} grants held")
    else:
        print(f"\n{len(created)} ACLs created; {len(rows)} grants held")
