"""`xidpipe scan FILE...`: the single-node tool: classified incidents from kernel logs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from models.kernlog import FaultRecord, KernelLogParser
from models.scan import ScanIncident, scan
from models.stream_policy import PipelinePolicy
from xidpipe.commands import output
from xidpipe.commands._input import InputError, add_year_option, iter_lines, parse_options
from xidpipe.commands.exits import EXIT_FINDINGS, EXIT_OK, UsageError
from xidpipe.commands.options import json_parent
from xidpipe.commands.timeflags import format_time
from xidpipe.replay.layout import ReplayInputError, read_state


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "scan",
        help="group GPU faults in kernel logs into classified incidents", parents=[json_parent()],
        description="Parse kernel logs, attach identity lines to their GPU, group faults into incidents "
        "per fault of one component (a GPU, an NVSwitch, a node's driver, a workload) and classify each "
        "with a reason, by the stream pipeline's own rules: with the nodes' recorded state (--state) the "
        "incidents are those `xidpipe replay` finds. Times are printed in UTC (ISO 8601); a log with no wall "
        "clock shows the uptime. Exit status: 0 no fault found, 1 faults found, 2 an input could not be read.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="kernel log files (- for standard input)")
    p.add_argument("--host", default=None,
                   help="host name for lines that carry none (default: the file's name without extension)")
    p.add_argument("--state", type=Path, default=None, metavar="FILE",
                   help="the nodes' recorded state, one node record (inventory, pod assignments, processes) a line, "
                   "as in a replay directory's state.jsonl: faults are attributed to the GPUs and pods of their time, "
                   "and an application fault of a known pod is its workload's")
    p.add_argument("--repeat-threshold", type=int, default=PipelinePolicy().repeat_threshold,
                   help="application-fault repeats on one GPU from which hardware is suspected (default: %(default)s)")
    add_year_option(p)
    p.set_defaults(func=run)


def _default_host(path: str, given: str | None) -> str:
    if given:
        return given
    if path == "-":
        return "stdin"
    name = os.path.basename(path)
    for ext in (".gz", ".log", ".txt", ".json", ".jsonl"):
        name = name.removesuffix(ext)
    return name or path


def collect(paths: list[str], host: str | None, year: int | None) -> Iterator[tuple[str, FaultRecord]]:
    for path in paths:
        default = _default_host(path, host)
        parser = KernelLogParser(parse_options(year))
        for record in parser.parse(iter_lines(path)):
            yield default, record


def run(args: argparse.Namespace) -> int:
    policy = PipelinePolicy(repeat_threshold=args.repeat_threshold)
    try:
        state = read_state(args.state) if args.state is not None else []
        incidents = scan(collect(args.files, args.host, args.year), policy, state)
    except (InputError, ReplayInputError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        json.dump([i.to_dict() for i in incidents], sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print_table(incidents)
    return EXIT_FINDINGS if incidents else EXIT_OK


def print_table(incidents: list[ScanIncident], out: Any = None) -> None:
    out = out or sys.stdout
    if not incidents:
        print("No GPU faults found.", file=out)
        return
    rows = []
    for inc in incidents:
        d = inc.to_dict()
        gpu = d["gpu_uuid"] or d["pci"] or "-"
        if d["gpu_uuid"] and d["pci"]:
            gpu = f"{d['pci']}/{d['gpu_uuid'][:12]}"
        if d["component"] == "workload":
            gpu = d["component_id"]
        rows.append([d["host"], gpu, d["serial"], d["family"], d["category"], d["count"], ", ".join(d["codes"]),
                     format_time(d["first_seen"]), format_time(d["last_seen"])])
    output.table(["HOST", "GPU", "SERIAL", "FAMILY", "CATEGORY", "COUNT", "CODES", "FIRST", "LAST"], rows, out)
    print(file=out)
    for n, inc in enumerate(incidents, 1):
        d = inc.to_dict()
        action = f"{d['immediate_action']}, for {d['decisive_code']}" if d["immediate_action"] else "-"
        print(f"[{n}] {inc.host} {inc.family} → {inc.category}: {inc.reason} (NVIDIA action: {action})",
              file=out)
    faults = sum(i.count for i in incidents)
    print(f"\n{len(incidents)} incident(s) from {faults} fault record(s); "
          f"catalog {incidents[0].records[0].catalog_version}", file=out)
