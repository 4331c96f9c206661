"""The main job on one machine: the whole pipeline over the bundled sample cluster.

A local Apache Kafka (unless XIDPIPE_DEMO_KAFKA names one), the stream worker, one node agent per
sample node replaying its kernel log, the nodes' recorded inventories and pod assignments, the
evidence the agents would have captured at the faults (recorded tool outputs, `evidence/`), and
the responder with its embedded defaults: dry-run cordon, Jira, Slack, PagerDuty and CloudEvents
outboxes, tickets, messages and pages linking the incident pages of `xidpipe serve` at its default
address. The database is the embedded default, `var/xidpipe.db`, so `xidpipe` commands can look at
the result afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import SecretStr
from sqlalchemy.orm import Session

from agents.evidence import FOLLOW_S
from agents.kernlog.filetail import content_hash
from history.incident_rows import all_incidents
from history.ledger_store import rebuild_ledger
from history.tables import GpuCard, Incident
from models.account import Account
from models.dossier import account_of
from models.event_time import boot_times, line_event_time
from models.evidence_lines import capture_line
from models.node_records import Evidence, EvidenceItem, NodeRecord
from models.topics import topology
from models.wire import decode_node_record
from respond.cordon.runtime import build_executor
from respond.dossier_builder import action_items, build_dossier
from respond.responder import Responder, build_responder, run_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from service.metrics import counted
from streams.runner import WorkerProcess, consumer_lag, group_lag, produce, wait_caught_up
from streams.settings import WorkerSettings
from streams.store import Store
from streams.worker import prepare

VAR = Path("var")
DB = VAR / "xidpipe.db"
OUTBOX = VAR / "outbox"
WORK = VAR / "demo"
REPLAY_RATE = 4000  # kernel lines per second and node
INCIDENT_PAGES = "http://127.0.0.1:8780"  # where `xidpipe serve` listens by default
KERNEL_WINDOW = 40  # kernel-log lines up to the fault in a recorded capture
KERNEL_FOLLOW_S = FOLLOW_S  # and the lines after it, as the agent waits for them


def sample_dir() -> Path:
    return Path(str(resources.files("xidpipe").joinpath("samples", "cluster")))


def sample_state() -> list[NodeRecord]:
    text = (sample_dir() / "state.jsonl").read_text(encoding="utf-8")
    return [decode_node_record(line) for line in text.splitlines() if line.strip()]


def _item(name: str, command: list[str], status: str, data: bytes) -> EvidenceItem:
    return EvidenceItem(name=name, command=tuple(command), status=status,  # type: ignore[arg-type]
                        size_bytes=len(data), data=base64.b64encode(gzip.compress(data, 6)).decode())


def _message(line: bytes) -> str:
    """A log line as the kernel wrote it (a journald export line: its MESSAGE)."""
    text = line.decode("utf-8", "replace")
    if text.startswith("{"):
        try:
            return str(json.loads(text).get("MESSAGE", text))
        except ValueError:
            return text
    return text


def recorded_capture(folder: Path) -> Evidence:
    """One recorded capture (`evidence/<name>/capture.json` and its files) as the agent publishes it:
    the trigger is the kernel line's record id as the file source names it (`file:<hash>:<offset>`)."""
    spec = json.loads((folder / "capture.json").read_text(encoding="utf-8"))
    node = str(spec["node"])
    lines = (sample_dir() / f"{node}.log").read_bytes().split(b"\n")
    index = next((i for i, ln in enumerate(lines) if spec["trigger"].encode() in ln), None)
    if index is None:
        raise ValueError(f"{folder.name}: no line of {node}.log contains {spec['trigger']!r}")
    offset = sum(len(ln) + 1 for ln in lines[:index])
    items = [_item(name, item["command"], item["status"], (folder / item["file"]).read_bytes())
             for name, item in spec["items"].items()]
    captured_at = datetime.fromisoformat(spec["captured_at"])
    window, last = _kernel_window(lines, index, node, captured_at)
    items.append(_item("kernel-log", [], "ok", window.encode()))
    captured_at = max(captured_at, last) if last is not None else captured_at  # taken once its lines were in
    digest = content_hash(lines[index] + b"\n")
    trigger = f"file:{digest}:{offset}"
    return Evidence(node=node, record_id=f"evidence:{trigger}", trigger_record_id=trigger,
                    gpu_uuid=spec.get("gpu_uuid"), pci_bus_id=spec.get("pci_bus_id"), xid=spec.get("xid"),
                    pid=spec.get("pid"), captured_at=captured_at, items=tuple(items))


def _kernel_window(lines: list[bytes], index: int, node: str, captured_at: datetime) -> tuple[str, datetime | None]:
    """The kernel-log window the agent captures for the fault at line `index`: the lines up to it and
    those within `KERNEL_FOLLOW_S` after it, each after its time in UTC (`capture_line`); and the time
    of its last line."""
    boot = boot_times(sample_state()).get(node)

    def timed(ln: bytes) -> tuple[datetime | None, str]:
        text = ln.decode("utf-8", "replace")
        return line_event_time(text, read_at=captured_at, boot_time=boot), _message(ln)

    window = [timed(ln) for ln in lines[max(0, index + 1 - KERNEL_WINDOW): index + 1]]
    fault_at = window[-1][0]
    for ln in lines[index + 1:]:
        at, text = timed(ln)
        if not ln.strip() or fault_at is None or at is None or (at - fault_at).total_seconds() > KERNEL_FOLLOW_S:
            break
        window.append((at, text))
    return "".join(capture_line(at, text) + "\n" for at, text in window), window[-1][0]


def sample_evidence() -> list[Evidence]:
    """The sample cluster's recorded evidence: what the agents capture at the faults (the replaying
    agents run without capture: the tools they would call are not on this machine)."""
    root = sample_dir() / "evidence"
    return [recorded_capture(f) for f in sorted(root.iterdir()) if (f / "capture.json").is_file()]


@contextmanager
def kafka(say: Callable[[str], None]) -> Iterator[str]:
    external = os.environ.get("XIDPIPE_DEMO_KAFKA")
    if external:
        say(f"Kafka: {external} (XIDPIPE_DEMO_KAFKA)")
        yield external
        return
    from xidpipe.localinfra.kafka import LocalKafka, fetch

    fetch()
    with LocalKafka(num_partitions=2) as broker:
        say(f"Kafka: local Apache Kafka at {broker.bootstrap}, ready in "
            f"{broker.format_seconds + broker.ready_seconds:.1f} s")
        yield broker.bootstrap


def agent_command(
    log: Path, node: str, bootstrap: str, state_dir: Path, boot_time: datetime | None = None
) -> list[str]:
    """The agent replaying one node's log; `boot_time` (the node's, from its recorded state) places
    lines stamped only with an uptime on the node's own day rather than on the day of the replay."""
    boot = ["--boot-time", boot_time.isoformat()] if boot_time is not None else []
    return [sys.executable, "-m", "xidpipe.cli", "agent", "--source", "file", "--log-file", str(log),
            "--no-follow", "--replay-rate", str(REPLAY_RATE), "--node", node, "--bootstrap-servers", bootstrap,
            "--state-dir", str(state_dir), "--no-nvml", "--no-podresources", "--no-evidence", "--no-metrics",
            "--log-level", "warning", *boot]


def run_agents(bootstrap: str, say: Callable[[str], None], timeout: float) -> None:
    logs = sorted(sample_dir().glob("*.log"))
    boots = boot_times(sample_state())
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    for log in logs:
        node = log.stem
        out = WORK / "agents" / f"{node}.log"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as sink:
            command = agent_command(log, node, bootstrap, WORK / "agents" / node, boots.get(node))
            procs.append((node, subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT), out))
    say(f"Agents: {len(procs)} node agents replaying {', '.join(p[0] for p in procs)}")
    deadline = time.monotonic() + timeout
    for node, proc, out in procs:
        try:
            code = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            raise TimeoutError(f"agent for {node} did not finish its replay in {timeout:.0f} s") from None
        if code != 0:
            raise RuntimeError(f"agent for {node} exited with {code}:\n{out.read_text(errors='replace')[-3000:]}")


async def respond_until_idle(settings: RespondSettings, responder: Responder, timeout: float) -> None:
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(run_responder(settings, responder, stop, ready))
    await asyncio.wait_for(ready.wait(), 30)
    topic = topology(settings.topic_prefix, 1).actions.name
    deadline = time.monotonic() + timeout
    quiet_since = None
    while time.monotonic() < deadline:
        lag = await group_lag(settings.bootstrap_servers, settings.group_id, [topic])
        if lag == 0:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 2.0:
                break
        else:
            quiet_since = None
        await asyncio.sleep(0.3)
    # Send what the group timers still hold: in the demo nothing more will arrive.
    await asyncio.to_thread(responder.sinks.chat.flush)
    await asyncio.to_thread(responder.sinks.tickets.drain)
    await asyncio.to_thread(responder.sinks.pages.drain)
    stop.set()
    await task


def run_demo(say: Callable[[str], None] = print, timeout: float = 110.0) -> dict[str, Any]:
    """Run the sample cluster through the whole pipeline; returns what the demo prints from."""
    started = time.monotonic()
    for path in (DB, OUTBOX, WORK):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    WORK.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{DB}"
    run = uuid.uuid4().hex[:6]
    with ExitStack() as stack:
        bootstrap = stack.enter_context(kafka(say))
        worker_settings = WorkerSettings(
            bootstrap_servers=bootstrap, database_url=db_url, app_id=f"xidpipe-demo-{run}", partitions=2,
            datadir=WORK / "faust", session_timeout_s=6.0, heartbeat_interval_s=1.0, commit_interval_s=0.5,
            cluster="demo",
        )
        prepare(worker_settings)
        worker = WorkerProcess(worker_settings, WORK / "worker.log").start()
        stack.callback(worker.terminate)
        say(f"Worker: Faust stream worker (pid {worker.pid}), database {DB}")
        state = sample_state()
        produce(bootstrap, topology(worker_settings.topic_prefix, worker_settings.partitions), state)
        say(f"Node state: {len(state)} recorded inventory and pod-assignment records")
        run_agents(bootstrap, say, timeout=max(10.0, timeout - (time.monotonic() - started)))
        wait_caught_up(worker_settings, max(10.0, timeout - (time.monotonic() - started)), worker)
        # Evidence after its faults are stored, as a capture follows its fault.
        evidence = sample_evidence()
        produce(bootstrap, topology(worker_settings.topic_prefix, worker_settings.partitions), evidence)
        say(f"Evidence: {len(evidence)} recorded captures (nvidia-smi -q, lspci -vvv, the kernel log)")
        wait_caught_up(worker_settings, max(10.0, timeout - (time.monotonic() - started)), worker)
        lag_left = consumer_lag(bootstrap, worker_settings)
        say(f"Stream: every node record processed (lag {lag_left})")
        respond = RespondSettings(
            bootstrap_servers=bootstrap, database_url=SecretStr(db_url), cluster="demo",
            group_id=f"xidpipe-responder-{run}",
            sinks=SinkSettings(outbox_dir=OUTBOX, group_wait_s=0, incident_url_base=INCIDENT_PAGES))
        executor = build_executor(respond.actions, database_url=respond.database)  # no cluster: dry-run decisions
        sinks = build_sinks(respond.sinks, respond.database)
        responder = build_responder(respond, executor, sinks)
        asyncio.run(respond_until_idle(respond, responder, max(10.0, timeout - (time.monotonic() - started))))
        # Handled: every request consumed, less those dead-lettered (the responder's metrics count both).
        handled = counted(responder.metrics.actions) - counted(responder.metrics.dead_letters)
        say(f"Responder: {handled:.0f} action requests handled")
        worker.terminate()
    store = Store(db_url)
    try:
        # The GPU asset ledger from the stored inventories: only those the worker has not applied itself.
        with Session(store.engine) as s, s.begin():
            rebuild_ledger(s)
            cards = s.scalar(sa.select(sa.func.count()).select_from(GpuCard)) or 0
        say(f"Ledger: {cards} GPU cards with their placements")
        # Incidents merged into another (a job's faults found to stay with a GPU) are part of that one.
        incidents = [i for i in all_incidents(store.engine) if not i.get("merged_into")]
        records = executor.store.recent(500)
        with Session(store.engine) as s:
            accounts = {i["incident_id"]: incident_account(s, i["incident_id"], records) for i in incidents}
    finally:
        store.dispose()
    return {"incidents": incidents, "seconds": time.monotonic() - started,
            "actions": records, "accounts": accounts}


def incident_account(s: Session, incident_id: str, records: list[Any]) -> Account | None:
    """The incident's account (`models.account`) as its ticket and message state it."""
    row = s.get(Incident, incident_id)
    if row is None:
        return None
    return account_of(build_dossier(s, row, action_items(records, incident_id), cluster="demo"))
