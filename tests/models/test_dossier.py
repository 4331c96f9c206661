"""The fault dossier: golden files for Markdown, Jira wiki markup, ADF and JSON (the wiki and ADF
bodies checked as Jira takes them), caps, nothing "unknown", and no secret in any output.

Set UPDATE_GOLDEN=1 to rewrite the golden files after an intended change, then review the diff.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from models.dossier import (
    EVIDENCE_CAP_BYTES,
    ActionItem,
    Attribution,
    CodeInfo,
    Dossier,
    DossierGpu,
    EvidenceItem,
    HistoryItem,
    evidence_files,
    render_adf,
    render_jira_wiki,
    render_json,
    render_markdown,
)
from tests.fakes.jira.validate import adf_errors, wiki_errors

GOLDEN = Path(__file__).parent / "golden"
SECRETS = ["hunter2-db-pass", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "s3cr3tWandbKey99"]


def t(h: int, m: int = 0, s: int = 0) -> datetime:
    return datetime(2025, 11, 27, h, m, s, tzinfo=UTC)


def sample() -> Dossier:
    return Dossier(
        incident_id="inc-20251127-0042",
        fingerprint="v1:5d2f0c1e9a8b7c6d",
        cluster="train-east",
        node="gpu-node-03",
        family="gpu_lost",
        category="hardware",
        reason="GPU fell off the bus (Xid 79, fallen off the bus, gpu_lost): the device no longer answers",
        status="mitigated",
        count=3,
        first_seen=t(5, 13, 31),
        last_seen=t(5, 13, 32),
        codes=[
            CodeInfo(code="Xid 79", count=1, mnemonic="ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
                     description="GPU has fallen off the bus", immediate_action="RESTART_BM",
                     investigatory_action="CONTACT_SUPPORT"),
            CodeInfo(code="fallen off the bus", count=2),
        ],
        catalog_version="2026.11-1",
        driver_version="550.127.05",
        gpu=DossierGpu(index=3, minor_number=3, model="NVIDIA H100 80GB HBM3",
                       uuid="GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63", serial="1654923011263", pci="0000:63:00.0",
                       numa_node=1),
        attribution=Attribution(pod="llm-pretrain-7-worker-3", namespace="team-llm", container="trainer",
                                owner="PyTorchJob/llm-pretrain-7", process="pt_main_thread", pid=41122),
        evidence=[
            EvidenceItem(name="nvidia-smi -q", source="node", captured_at=t(5, 13, 33), status="timeout",
                         content="Unable to determine the device handle for GPU 0000:63:00.0: Unknown Error\n"),
            EvidenceItem(name="kernel log window", source="node", captured_at=t(5, 13, 33),
                         content="[20411.500000] NVRM: Xid (PCI:0000:63:00): 79, pid='<unknown>', name=<unknown>, "
                                 "GPU has fallen off the bus.\n"),
            EvidenceItem(name="pod description", source="cluster", captured_at=t(5, 13, 40),
                         content="Name: llm-pretrain-7-worker-3\nEnvironment:\n  DB_PASSWORD=hunter2-db-pass\n"
                                 "  GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"
                                 "Args: --wandb-api-key=s3cr3tWandbKey99 --epochs 3\n"),
        ],
        gpu_history=[HistoryItem(incident_id="inc-20251002-0007", node="gpu-node-11",
                                 gpu_uuid="GPU-0a1b2c3d-0000-4000-8000-000000000011", family="memory",
                                 category="hardware", first_seen=datetime(2025, 10, 2, 8, tzinfo=UTC),
                                 status="returned")],
        actions=[
            ActionItem(at=t(5, 13, 32), action="cordon", outcome="done", decision="cordon",
                       reason="rule gpu-lost: cordon at once for Xid 79 (gpu_lost)",
                       detail="cordon: rule gpu-lost: cordon at once for Xid 79 (gpu_lost)"),
            ActionItem(at=t(5, 13, 33), action="evict", outcome="done", reason="2 pods evicted"),
        ],
    )


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from the golden file (UPDATE_GOLDEN=1)"


def test_markdown_golden() -> None:
    check_golden("dossier_gpu_lost.md", render_markdown(sample()))


def test_jira_wiki_golden_is_valid_wiki_markup() -> None:
    body = render_jira_wiki(sample())
    assert wiki_errors(body) == []
    check_golden("dossier_gpu_lost.wiki", body)


def test_adf_golden_is_valid_against_the_adf_schema() -> None:
    doc = render_adf(sample())
    assert adf_errors(doc) == []
    check_golden("dossier_gpu_lost.adf.json", json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def test_hostile_text_stays_text_in_every_format() -> None:
    d = sample()
    d.reason = "h1. boom |---| {noformat} [click|http://evil] *bold* -strike- ## head ??cite?? {{mono"
    d.attribution.pod = "pod|with|pipes"
    d.evidence[1].content = "line one\n{noformat}\nh2. not a heading\n||a||b||\n"
    wiki = render_jira_wiki(d)
    assert wiki_errors(wiki) == []
    assert "pod\\|with\\|pipes" in wiki and "\\[click\\|http://evil\\]" in wiki
    assert adf_errors(render_adf(d)) == []
    md = render_markdown(d)
    assert "pod\\|with\\|pipes" in md


def test_the_stand_ins_checks_refuse_what_jira_would_render_badly() -> None:
    assert wiki_errors(render_markdown(sample()))  # Markdown is not wiki markup
    for bad in ("# Title\n", "|---|---|\n", "||a||b||\n|1|\n", "{noformat}\nx\n", "see {foo}\n", "h2.\n",
                "|a|b\n", "x {{mono\n"):
        assert wiki_errors("ok\n" + bad if not bad.startswith("#") else bad), bad
    doc = render_adf(sample())
    doc["content"].append({"type": "paragraph", "content": [{"type": "text", "text": ""}]})
    assert adf_errors(doc)
    assert adf_errors({"type": "doc", "content": []})  # no version
    assert adf_errors("a string")


def test_what_to_do_now_and_the_link_come_first() -> None:
    d = sample()
    d.incident_url = "https://xidpipe.example.com/incidents/inc-20251127-0042"
    wiki = render_jira_wiki(d)
    assert wiki.startswith("h2. What to do now\n\n# xidpipe kept what the node showed at the fault")
    assert f"[{d.incident_url}|{d.incident_url}]" in wiki.split("h2. Summary")[0]
    top = render_adf(d)["content"][:3]
    assert top[1]["type"] == "orderedList"
    assert top[2]["content"][1]["marks"] == [{"type": "link", "attrs": {"href": d.incident_url}}]


def test_json_golden() -> None:
    check_golden("dossier_gpu_lost.json", json.dumps(render_json(sample()), indent=2, sort_keys=True) + "\n")


def test_rendering_is_deterministic_whatever_the_input_order() -> None:
    a, b = sample(), sample()
    b.evidence.reverse()
    b.actions.reverse()
    assert render_markdown(a) == render_markdown(b)


def test_no_secret_from_the_inputs_in_any_output() -> None:
    d = sample()
    outputs = [render_markdown(d), json.dumps(render_json(d))] + [v.decode() for v in evidence_files(d).values()]
    for out in outputs:
        for secret in SECRETS:
            assert secret not in out


def test_evidence_is_capped_in_the_body_but_attached_whole() -> None:
    d = sample()
    d.evidence = [EvidenceItem(name="dmesg", source="node", content="x" * (EVIDENCE_CAP_BYTES * 2))]
    md = render_markdown(d)
    assert "x" * EVIDENCE_CAP_BYTES in md and "x" * (EVIDENCE_CAP_BYTES + 1) not in md
    assert "full capture is attached" in md
    assert render_json(d)["evidence"][0]["truncated"] is True
    assert evidence_files(d) == {"node-dmesg.txt": b"x" * (EVIDENCE_CAP_BYTES * 2)}


def test_unknown_facts_are_left_out_never_printed_as_unknown() -> None:
    d = sample()
    d.attribution = Attribution()
    d.gpu.serial = d.gpu.model = None
    d.driver_version = None
    d.codes[0].mnemonic = None
    d.evidence = []  # captured text is quoted as it was (a kernel line may say pid='<unknown>')
    for out in (render_markdown(d), render_jira_wiki(d), json.dumps(render_adf(d))):
        assert "unknown" not in out.lower()
    assert "No workload is known." in render_markdown(d)


def test_a_monitoring_tool_is_not_named_as_the_workloads_process() -> None:
    d = sample()
    d.attribution.process, d.attribution.pid = "nvidia-smi", 3317
    md = render_markdown(d)
    assert "Pod: llm-pretrain-7-worker-3" in md and "Process:" not in md and "3317" not in md


DEMO = sorted((GOLDEN / "demo").glob("*.dossier.json"))


@pytest.mark.parametrize("path", DEMO, ids=[p.name.removesuffix(".dossier.json") for p in DEMO])
def test_the_demos_tickets_golden_in_wiki_markup_and_adf(path: Path) -> None:
    """The five tickets of `make demo` (their dossiers as the demo attached them), as Jira Server and
    Cloud get them: valid, starting with what to do now and the incident's link, evidence filled."""
    d = Dossier.model_validate_json(path.read_text(encoding="utf-8"))
    stem = path.name.removesuffix(".dossier.json")
    wiki, doc = render_jira_wiki(d), render_adf(d)
    assert wiki_errors(wiki) == [] and adf_errors(doc) == []
    assert wiki.startswith("h2. What to do now\n\n# ") and f"|{d.incident_url}]" in wiki
    assert "No evidence captured yet" not in wiki and "{noformat}" in wiki
    assert "unknown" not in wiki.split("h2. Evidence")[0].lower()
    check_golden(f"demo/{stem}.wiki", wiki)
    check_golden(f"demo/{stem}.adf.json", json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    check_golden(f"demo/{stem}.md", render_markdown(d))  # the outbox's ticket body and dossier.md


def test_the_demos_tickets_say_what_the_on_call_engineer_needs() -> None:
    """Read as the on-call engineer: the DBE leads with Xid 48 and names Xid 63, every command names its
    GPU, the evidence shows the fault's own lines, and the NVSwitch's ticket says it stays in service."""
    docs = {p.name.removesuffix(".dossier.json"): render_markdown(Dossier.model_validate_json(p.read_text()))
            for p in DEMO}
    dbe = docs["gpu-node-02-memory"]
    assert dbe.startswith("# \\[xidpipe\\] hardware: Xid 48, Xid 13, Xid 94, Xid 63 on gpu-node-02 GPU 0 (serial ")
    assert "| **NVIDIA's action** | WORKFLOW_XID_48 for Xid 48 |" in dbe
    assert "Z  NVRM: Xid (PCI:0000:b7:00): 63, " in dbe  # the Xid 63 after the 48, with its time in UTC
    gsp = docs["gpu-node-05-gsp"]
    assert "Z  NVRM: A GPU crash dump has been created" in gsp and "Z  NVRM: Xid (PCI:0000:4e:00): 154, " in gsp
    assert "names the recovery GPU 0 (serial 1654923050078) needs now: GPU Reset Required." in gsp
    switch = docs["gpu-node-04-nvswitch"]
    assert "SXid (PCI:0000:86:00.0): 12028, Severity 0" in switch and "stays in service" in switch
    assert "fatal SXid stops" not in switch and "cordoned" not in switch.split("## Summary")[0]
    for name, md in docs.items():
        todo = md.split("## What to do now")[1].split("## Summary")[0]
        assert "xfs filesystem" not in md.split("## Evidence")[1].split("```")[1], name
        assert " on 16549" not in todo and "dcgmi diag -r 3 on" not in todo, name  # tools take -i, not a serial
        assert "dry-run" not in md and ("dry run" in todo) == ("cordons run as a dry run" in md), name
