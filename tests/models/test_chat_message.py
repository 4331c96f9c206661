"""Slack messages: golden Block Kit payload (built with slack-sdk), what to do now, links, no
"unknown", no monitoring tool named as the workload, mrkdwn escaping, routing, no secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.chat_message import Routing, message_content, route
from models.dossier import Attribution, Dossier
from respond.sinks.slack.blocks import message
from tests.models.test_dossier import DEMO, GOLDEN, SECRETS, check_golden, sample

TICKET = "https://jira.example.com/browse/GPU-123"
PAGE = "https://xidpipe.example.com/incidents/inc-20251127-0042"


def render(d: object = None, **kw: object) -> dict[str, object]:
    return message(message_content(d or sample(), **kw))  # type: ignore[arg-type]


def test_block_kit_golden() -> None:
    msg = render(ticket_url=TICKET, incident_url=PAGE)
    check_golden("slack_gpu_lost.json", json.dumps(msg, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def test_what_to_do_now_comes_right_after_the_headline_and_links_follow() -> None:
    blocks = render(ticket_url=TICKET, incident_url=PAGE)["blocks"]
    texts = [json.dumps(b) for b in blocks]  # type: ignore[attr-defined]
    assert "What to do now" in texts[2] and "lspci -s 0000:63:00.0" in texts[2]
    links = next(t for t in texts if PAGE in t)
    assert f"<{PAGE}|Incident page>" in json.loads(links)["text"]["text"] and TICKET in links


def test_fallback_text_says_what_where_what_to_do_and_links() -> None:
    text = str(render(ticket_url=TICKET, incident_url=PAGE)["text"])
    for part in ("hardware", "gpu-node-03", "0000:63:00.0", "1654923011263", "llm-pretrain-7-worker-3",
                 "Decision: Cordoned: xidpipe cordoned gpu-node-03", "GPU-123",
                 "What to do now: Before anything is reset or rebooted, run `nvidia-bug-report.sh`",
                 PAGE):
        assert part in text


def test_nothing_unknown_is_printed() -> None:
    d = sample()
    d.attribution = Attribution()
    d.gpu.serial = None
    out = json.dumps(render(d))
    assert "unknown" not in out.lower()
    assert "Workload" not in out  # no workload known: no field, rather than "unknown/unknown"


def test_a_monitoring_tool_is_never_named_as_the_workload() -> None:
    d = sample()
    d.attribution = Attribution(pod="inference-gw-2", namespace="team-serving", process="nvidia-smi", pid=3317)
    out = json.dumps(render(d))
    assert "inference-gw-2" in out and "nvidia-smi" not in out.split("What to do now")[0]
    assert "pid 3317" not in out


def test_application_faults_tell_the_owner_and_say_no_hardware_action() -> None:
    d = sample()
    d.category, d.family, d.component = "application", "application", "workload"
    d.attribution = Attribution(owner="team-vision", workload="team-vision/resnet-train/trainer")
    steps = message_content(d).steps
    assert steps[0].startswith("xidpipe kept what the node showed")  # the guide's order: the evidence first
    assert "team-vision" in steps[1] and "No hardware action" in steps[1]


def test_user_text_is_escaped_for_mrkdwn() -> None:
    d = sample()
    d.reason = "bad <!channel> & <https://evil.example|click>"
    out = json.dumps(render(d))
    assert "<!channel>" not in out and "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;" in out


def test_no_secret_in_the_message() -> None:
    d = sample()
    d.reason = f"{d.reason}; token=ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    out = json.dumps(render(d))
    assert all(s not in out for s in SECRETS)


def test_a_long_title_is_cut_to_slacks_header_limit() -> None:
    d = sample()
    d.node = "n" * 300
    header = render(d)["blocks"][0]  # type: ignore[index]
    assert len(header["text"]["text"]) == 150


@pytest.mark.parametrize(("category", "namespace", "meta", "expected"), [
    ("hardware", "team-a", {}, "#gpu-infra"),
    ("application", "team-a", {"xidpipe.io/slack-channel": "#team-a"}, "#team-a"),
    ("application", "mapped", {}, "#mapped-ch"),
    ("application", "team-b", {}, "#gpu-alerts"),
    ("application", None, {}, "#gpu-alerts"),
])
def test_routing(category: str, namespace: str | None, meta: dict[str, str], expected: str) -> None:
    routing = Routing(namespace_channels={"mapped": "#mapped-ch"})
    channel, why = route(category, namespace, meta, routing)
    assert channel == expected and why and "unknown" not in why


# The demo's six messages: its five tickets' incidents, and the application fault that gets no ticket.
MESSAGES = [*DEMO, *sorted((GOLDEN / "demo" / "message-only").glob("*.dossier.json"))]


@pytest.mark.parametrize("path", MESSAGES, ids=[p.name.removesuffix(".dossier.json") for p in MESSAGES])
def test_the_demos_messages_golden(path: Path) -> None:
    """The demo's chat messages as Slack (and the outbox) get them: linking the incident's page (the outbox
    tracker has no issue address), saying the decision and NVIDIA's action as the ticket does."""
    d = Dossier.model_validate_json(path.read_text(encoding="utf-8"))
    msg = message(message_content(d, None, d.incident_url))
    text = json.dumps(msg)
    assert "file://" not in text and "Action taken" not in text and d.incident_url in text
    check_golden(f"demo/{path.name.removesuffix('.dossier.json')}.slack.json",
                 json.dumps(msg, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
