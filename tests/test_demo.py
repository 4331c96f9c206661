"""`make demo`, the main job: the whole pipeline on the sample cluster, run as a user runs it.

The demo starts its own Kafka from the cached jars (as on a fresh machine), so this test needs
what the Kafka fixture needs; it runs in a scratch directory, where the demo writes var/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import store_reads
from xidpipe.localinfra.kafka import cache_dir, jars_complete

pytestmark = pytest.mark.kafka


def test_demo_runs_the_sample_cluster_through_the_pipeline(tmp_path: Path) -> None:
    if not jars_complete(cache_dir() / "lib"):
        reason = "Kafka jars missing: run `xidpipe dev kafka fetch`"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_")}
    proc = subprocess.run([sys.executable, "-m", "xidpipe.cli", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    # One incident per fault of one component (tests/test_sample_cluster.py states them one by one).
    assert "6 incidents:" in out
    heads = dict(re.findall(r"^\[\d+\] (\S+  \S+)  (\S+)", out, re.M))
    assert heads["gpu-node-02  memory"] == "HARDWARE"
    assert heads["gpu-node-01  application"] == "APPLICATION"
    assert heads["gpu-node-03  gpu_lost"] == "HARDWARE"
    assert heads["gpu-node-04  nvlink"] == "INTERCONNECT"
    assert heads["gpu-node-04  nvswitch"] == "INTERCONNECT"
    # attribution from the recorded pod assignments, at the fault's time, in the order the jobs faulted
    assert "team-nlp/bert-finetune-2/finetune, team-serving/vllm-serve-5/vllm, team-vision/trainer-9/trainer" in out
    # dry-run cordon decisions, never for the application faults, said as the tickets say them
    cordons = re.findall(r"^  (gpu-node-\d+): Not cordoned \(dry run\)", out, re.M)
    assert "gpu-node-03" in cordons and "gpu-node-01" not in cordons
    assert re.search(r"^  gpu-node-04: Not cordoned \(not needed\): no rule matches nvswitch", out, re.M)
    # The DBE (Xid 48, then 63 and 95, and the driver's Xid 45 for the job it killed) is one hardware incident:
    # the killed job is told it was affected, not blamed (no workload incident: still 6); NVIDIA's action is the
    # decisive code's (Xid 48's, not Xid 13's RESTART_APP), and a double-bit-error rule cordons it at once.
    assert "Xid 13, Xid 94, Xid 48, Xid 63, Xid 95, Xid 45" in out
    assert "why: the GPU failed 3 different jobs in 50 min (Xid 13), then Xid 48 (Double Bit ECC Error" in out
    assert "NVIDIA: WORKFLOW_XID_48" in out
    assert re.search(r"^  gpu-node-02: .*rule double-bit-error: cordon at once for Xid 48 \(memory; NVIDIA: "
                     r"WORKFLOW_XID_48\)", out, re.M)
    # outbox tickets and chat messages, each dossier naming its GPU
    tickets = sorted((tmp_path / "var" / "outbox" / "jira").glob("*/ticket.json"))
    assert len(tickets) >= 5
    lost = [json.loads(t.read_text()) for t in tickets if "gpu-node-03" in t.read_text()]
    assert lost
    assert list((tmp_path / "var" / "outbox" / "slack").glob("*/*.json"))
    assert_pages_in_the_outbox(tmp_path / "var" / "outbox", incidents=6)
    assert_tickets_and_messages_say_what_to_do(tmp_path / "var" / "outbox")
    assert (tmp_path / "var" / "xidpipe.db").exists()
    assert_replay_gives_the_demos_incidents(tmp_path / "var" / "xidpipe.db")

    # The history after the demo, with nothing configured: the CLI and the API read var/xidpipe.db.
    def cli(*args: str) -> dict[str, object]:
        run = subprocess.run([sys.executable, "-m", "xidpipe.cli", *args, "--json"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        return json.loads(run.stdout)  # type: ignore[no-any-return]

    listed = cli("incidents", "list", "--xid", "74")
    assert listed["total"] == 1 and listed["incidents"][0]["count"] == 800  # type: ignore[index]
    gpus = cli("gpus", "list")
    assert gpus["total"] == 7 and {g["state"] for g in gpus["gpus"]} == {"in_service"}  # type: ignore[attr-defined]
    card = cli("gpus", "history", "1654923008817")
    assert card["placements"][0]["node"] == "gpu-node-02"  # type: ignore[index]
    assert [i["category"] for i in card["incidents"]] == ["hardware"]  # type: ignore[index]
    # Five incidents on H100s (the job counts where it first faulted); the NVSwitch is no GPU.
    assert cli("stats")["incidents"]["by_gpu_model"] == {"NVIDIA H100 80GB HBM3": 5, "unknown": 1}  # type: ignore[index]

    from tests.web.conftest import start_server

    server, base = start_server("sqlite:///var/xidpipe.db", None, tmp_path / "serve.log", cwd=tmp_path,
                                extra_env={"XIDPIPE_DATABASE_URL": "", "XIDPIPE_WEB_TOKENS_FILE": ""})
    try:
        token = next(line.split()[2] for line in (tmp_path / "var" / "api-tokens").read_text().splitlines()
                     if line.split()[1:2] == ["read"])
        import urllib.request

        req = urllib.request.Request(f"{base}/api/v1/incidents?node=gpu-node-03",
                                     headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = json.loads(resp.read())
        assert {(i["family"], i["category"]) for i in body["incidents"]} >= {("gpu_lost", "hardware")}
        req = urllib.request.Request(f"{base}/incidents?node=gpu-node-03", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert "gpu-node-03" in resp.read().decode()
    finally:
        server.terminate()
        server.wait(10)


PAGES = "http://127.0.0.1:8780/incidents/"


def assert_pages_in_the_outbox(outbox: Path, incidents: int) -> None:
    """Every incident paged (no paging destination configured: the outbox takes every severity), as
    PagerDuty's trigger and the CloudEvent of its opening, each valid as its destination takes it."""
    from respond.sinks.cloudevents import schema
    from tests.fakes.cloudevents.receiver import spec_errors
    from tests.fakes.pagerduty.server import errors_of

    triggers = [json.loads(p.read_text()) for p in (outbox / "pagerduty").glob("*/opened-*.json")]
    opened = [json.loads(p.read_text()) for p in (outbox / "cloudevents").glob("*/opened-*.json")]
    assert len(triggers) == len(opened) == incidents
    assert all(errors_of({**t, "routing_key": "0" * 32}, frozenset()) == [] for t in triggers)
    assert all(spec_errors(e, schema()) == [] for e in opened)
    assert {t["payload"]["severity"] for t in triggers} >= {"critical"}
    assert all(t["client_url"].startswith("http") for t in triggers)  # the incident pages of `xidpipe serve`


def assert_tickets_and_messages_say_what_to_do(outbox: Path) -> None:
    """Every ticket and message: what to do now first, a link to the incident's page, no "unknown";
    every ticket's evidence section filled from the recorded captures; the Jira bodies valid as
    Jira Server (wiki markup) and Cloud (ADF) take them."""
    from tests.fakes.jira.validate import adf_errors, wiki_errors

    tickets = sorted(p.parent for p in (outbox / "jira").glob("*/ticket.json"))
    assert len(tickets) == 5
    for t in tickets:
        md = (t / "ticket.md").read_text()
        body, _, evidence = md.partition("\n## Evidence\n")
        assert "## What to do now\n\n1. " in body and PAGES in body, t.name
        assert "unknown" not in body.lower(), t.name  # the captures below quote the driver, pid='<unknown>' and all
        assert "No evidence captured yet" not in evidence and "### kernel-log (node" in evidence, t.name
        assert "### lspci (node" in evidence and "Kernel driver in use" in evidence, t.name
        assert wiki_errors((t / "description.wiki").read_text()) == [], t.name
        assert adf_errors(json.loads((t / "description.adf.json").read_text())) == [], t.name
    gsp = next((t / "ticket.md").read_text() for t in tickets if "Xid 119" in (t / "ticket.md").read_text())
    # The guide's order: what xidpipe kept, then what must be collected before any reset (the driver's own
    # request for a bug report), then the drain, then the vendor's action (Xid 154's decoded recovery).
    assert "1. xidpipe kept what the node showed at the fault" in gsp
    assert "2. The driver asked for `nvidia-bug-report.sh`" in gsp
    assert "GPU Reset Required." in gsp and "`nvidia-smi -r -i GPU-77aa01bc" in gsp and "`dcgmi diag -r 3 -i 0`" in gsp
    assert "Process: nvidia-smi" not in gsp and "Pod: inference-gw-2" in gsp  # nvidia-smi is no workload
    lost = next((t / "ticket.md").read_text() for t in tickets if "gpu_lost" in (t / "ticket.md").read_text())
    assert "3. Check before any reboot" in lost and "Unable to determine the device handle" in lost
    assert lost.index("Check before any reboot") < lost.index("Reboot gpu-node-03")
    messages = [json.loads(p.read_text()) for p in (outbox / "slack").glob("*/*.json")]
    assert messages
    for m in messages:
        text = json.dumps(m["blocks"])
        assert "What to do now" in text and PAGES in text and "unknown" not in text.lower(), m["key"]
        assert "What to do now" in m["text"] and "unknown" not in m["text"].lower()


def incident_facts(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What the Kafka path and replay must agree on, per incident (times and ids hold read times)."""
    return sorted((r["component"], r["node"], r["gpu_uuid"] or "", r["classification"], tuple(sorted(r["codes"])),
                   r["count"]) for r in rows)


def assert_replay_gives_the_demos_incidents(db: Path) -> None:
    """`xidpipe replay` of the sample cluster, in one process, finds the incidents the demo's Kafka path stored."""
    from streams.store import Store
    from xidpipe.demo import sample_dir
    from xidpipe.replay import run_replay
    from xidpipe.replay.run import incident_view

    store = Store(f"sqlite:///{db}")
    try:
        demo = [incident_view(r) for r in store_reads.incidents(store) if not r.get("merged_into")]
    finally:
        store.dispose()
    replayed = run_replay(sample_dir()).incidents
    assert demo and incident_facts(replayed) == incident_facts(demo)
    # The job the DBE killed is affected, not at fault; Xid 154's recovery is the GSP GPU's current instruction.
    dbe = next(i for i in demo if i["node"] == "gpu-node-02")
    assert (dbe["affected"], dbe["immediate_action"]) == (["team-vision/trainer-9/trainer"], "WORKFLOW_XID_48")
    gsp = next(i for i in demo if i["node"] == "gpu-node-05")
    assert (gsp["recovery_action"], gsp["immediate_action"]) == ("GPU_RESET", "RESET_GPU")
