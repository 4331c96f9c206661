"""Slack messages: golden Block Kit payload, fallback text, routing, no secrets."""

from __future__ import annotations

import json

import pytest

from models.chat_message import Routing, render_message, route
from tests.models.test_dossier import SECRETS, check_golden, sample


def test_block_kit_golden() -> None:
    msg = render_message(sample(), ticket_url="https://jira.example.com/browse/GPU-123")
    check_golden("slack_gpu_lost.json", json.dumps(msg, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def test_fallback_text_says_what_where_and_what_was_done() -> None:
    text = render_message(sample(), ticket_url="https://jira.example.com/browse/GPU-123")["text"]
    for part in ("hardware", "gpu-node-03", "0000:63:00.0", "1654923011263", "team-llm/llm-pretrain-7-worker-3",
                 "cordon (done)", "GPU-123"):
        assert part in text


def test_no_secret_in_the_message() -> None:
    d = sample()
    d.reason = f"{d.reason}; token=ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    out = json.dumps(render_message(d))
    assert all(s not in out for s in SECRETS)


@pytest.mark.parametrize(
    ("category", "namespace", "meta", "channel"),
    [
        ("hardware", "team-llm", {"xidpipe.io/slack-channel": "#team-llm"}, "#gpu-infra"),
        ("suspected_hardware", "team-llm", {}, "#gpu-infra"),
        ("fleet", None, {}, "#gpu-infra"),
        ("application", "team-llm", {"xidpipe.io/slack-channel": "#team-llm"}, "#team-llm"),
        ("application", "mapped", {"xidpipe.io/slack-channel": "#ignored"}, "#mapped-team"),
        ("application", "team-x", {}, "#gpu-alerts"),
        ("application", None, {}, "#gpu-alerts"),
    ],
)
def test_routing(category: str, namespace: str | None, meta: dict[str, str], channel: str) -> None:
    got, why = route(category, namespace, meta, Routing(namespace_channels={"mapped": "#mapped-team"}))
    assert got == channel and why
