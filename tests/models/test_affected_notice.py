"""Everyone affected is told: which workloads an incident's fault hit are told, where and in what words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.account import decision_text
from models.affected_notice import affected_notices
from models.chat_message import Routing
from models.dossier import Attribution, Dossier, account_of
from respond.sinks.slack.blocks import render
from tests.models.test_dossier import GOLDEN, check_golden

DBE = GOLDEN / "demo" / "gpu-node-02-memory.dossier.json"
APPLICATION = GOLDEN / "demo" / "message-only" / "gpu-node-01-application.dossier.json"
KEY = "xidpipe.io/slack-channel"
# team-nlp names its channel in a label, team-serving in an annotation (both are namespace metadata to the
# router), team-vision is mapped in the routing policy.
NAMESPACES = {"team-nlp": {KEY: "#nlp-oncall", "kubernetes.io/metadata.name": "team-nlp"},
              "team-serving": {KEY: "#serving"}}
ROUTING = Routing(namespace_channels={"team-vision": "#vision"})


def load(path: Path, **update: object) -> Dossier:
    return Dossier.model_validate_json(path.read_text(encoding="utf-8")).model_copy(update=update)


def told(d: Dossier, namespaces: dict[str, dict[str, str]] | None = None,
         routing: Routing = ROUTING) -> dict[str, str]:
    """workload → channel of the notices sent."""
    return {n.workload: n.channel for n in affected_notices(d, NAMESPACES if namespaces is None else namespaces,
                                                            routing) if n.told and n.channel}


def test_a_hardware_fault_tells_each_team_in_its_channel_that_it_killed_their_job() -> None:
    d = load(DBE)
    notices = affected_notices(d, NAMESPACES, ROUTING)
    assert [(n.workload, n.channel) for n in notices] == [
        ("team-nlp/bert-finetune/finetune", "#nlp-oncall"),
        ("team-serving/vllm-serve/vllm", "#serving"),
        ("team-vision/trainer/trainer", "#vision"),
    ]
    decided = decision_text(account_of(d))
    for n in notices:
        assert n.message is not None
        text = n.message.text
        assert text.startswith(f"Your job {n.workload} (pod {n.pods[0]}, namespace {n.namespace}) was killed by a "
                               "hardware fault on GPU 0 (serial 1654923008817) of gpu-node-02 (Xid 48)")
        assert "requeue it" in text and "not by your application" in text
        assert text.endswith(decided)  # the decision in the account's own words, never re-derived
        assert "crashed" not in text and "unknown" not in text.lower()
        assert d.incident_id in n.message.context and ("Incident page", d.incident_url) in n.message.links
    assert len({n.key for n in notices}) == 3


@pytest.mark.parametrize(("namespaces", "routing", "expected", "why"), [
    (NAMESPACES, ROUTING, {"team-nlp/bert-finetune/finetune": "#nlp-oncall",
                           "team-serving/vllm-serve/vllm": "#serving", "team-vision/trainer/trainer": "#vision"},
     "label, annotation and mapping"),
    ({"team-nlp": {KEY: "#from-meta"}}, Routing(namespace_channels={"team-nlp": "#mapped"}),
     {"team-nlp/bert-finetune/finetune": "#mapped"}, "the mapping wins over the namespace's metadata"),
    ({}, Routing(), {}, "no namespace names a channel: nobody's own"),
    ({"team-nlp": {KEY: "#gpu-infra"}, "team-serving": {KEY: "#serving"}}, Routing(),
     {"team-serving/vllm-serve/vllm": "#serving"}, "the infrastructure channel got the incident's message"),
    ({"team-nlp": {"other-key": "#x"}}, Routing(team_channel_key="other-key"),
     {"team-nlp/bert-finetune/finetune": "#x"}, "the configured key"),
])
def test_routing(namespaces: dict[str, dict[str, str]], routing: Routing, expected: dict[str, str], why: str) -> None:
    assert told(load(DBE), namespaces, routing) == expected, why


def test_each_notice_not_sent_says_why() -> None:
    notices = affected_notices(load(DBE), {"team-nlp": {KEY: "#gpu-infra"}}, Routing())
    reasons = {n.workload: n.reason for n in notices if not n.told}
    assert "infrastructure channel" in reasons["team-nlp/bert-finetune/finetune"]
    assert "no channel known for namespace team-serving" in reasons["team-serving/vllm-serve/vllm"]


def test_an_application_incident_keeps_its_own_message() -> None:
    """The application fault's own message goes to its team, in its own words: no second notice."""
    d = load(APPLICATION)
    assert d.category == "application" and account_of(d).affected
    notices = affected_notices(d, {d.attribution.namespace or "": {KEY: "#team"}}, ROUTING)
    assert notices and not any(n.told for n in notices)
    assert all("own message" in n.reason for n in notices)


@pytest.mark.parametrize(("category", "words"), [
    ("hardware", "a hardware fault"), ("interconnect", "an interconnect fault"),
    ("suspected_hardware", "a suspected hardware fault"), ("driver", "a GPU driver fault"),
])
def test_the_class_of_the_fault_is_said(category: str, words: str) -> None:
    [n, *_] = affected_notices(load(DBE, category=category), NAMESPACES, ROUTING)
    assert n.message is not None and f"killed by {words} on" in n.message.text


def test_no_workload_nothing_to_tell() -> None:
    assert affected_notices(load(DBE, affected=[], attribution=Attribution()), NAMESPACES, ROUTING) == []
    bare = Attribution(process="python", pid=7)  # a process with no pod: nothing to route by
    assert affected_notices(load(DBE, affected=[bare], attribution=bare), NAMESPACES, ROUTING) == []


def test_without_the_list_the_attributed_workload_is_told() -> None:
    d = load(DBE, affected=[])
    assert told(d) == {"team-vision/trainer/trainer": "#vision"}


def test_one_notice_per_workload_naming_its_pods() -> None:
    base = load(DBE)
    a = base.affected
    pods = [*a, a[0].model_copy(update={"pod": "bert-finetune-3"}), a[0], a[2]]
    notices = affected_notices(base.model_copy(update={"affected": pods}), NAMESPACES, ROUTING)
    assert [n.workload for n in notices] == [w.workload for w in a]
    assert notices[0].pods == ("bert-finetune-2", "bert-finetune-3")
    assert notices[0].message is not None and "(pods bert-finetune-2, bert-finetune-3, namespace team-nlp)" in \
        notices[0].message.text


def test_a_workload_without_a_name_is_told_by_its_pod() -> None:
    hit = [Attribution(pod="job-1", namespace="team-nlp")]
    [n] = affected_notices(load(DBE, affected=hit), NAMESPACES, ROUTING)
    assert (n.workload, n.channel, n.key) == ("job-1", "#nlp-oncall", "affected:team-nlp/job-1")
    assert n.message is not None and n.message.text.startswith("Your job job-1 (pod job-1, namespace team-nlp)")


def test_secrets_are_redacted() -> None:
    hit = [Attribution(pod="job-1", namespace="team-nlp", workload="team-nlp/password=hunter2/x")]
    [n] = affected_notices(load(DBE, affected=hit), NAMESPACES, ROUTING)
    assert n.message is not None and "hunter2" not in n.message.text + n.message.title


def test_the_demos_team_message_golden() -> None:
    """The message team-nlp gets about the demo's double-bit error, as Slack (and the outbox) get it."""
    [n, *_] = affected_notices(load(DBE), NAMESPACES, ROUTING)
    assert n.message is not None
    msg = render(n.message)
    assert msg["blocks"][0]["type"] == "header" and "requeue it" in msg["text"]
    check_golden("demo/gpu-node-02-memory.team-nlp.slack.json",
                 json.dumps(msg, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
