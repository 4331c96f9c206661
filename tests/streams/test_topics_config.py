"""The topics' declared broker configuration (`models.topics`), without a broker."""

from __future__ import annotations

import pytest

from models.topics import DAY_MS, config_changes, min_insync_replicas, topology


@pytest.mark.parametrize(("replicas", "min_isr"), [(1, 1), (2, 1), (3, 2), (5, 2)])
def test_min_insync_replicas_leaves_one_broker_down_writable(replicas: int, min_isr: int) -> None:
    assert min_insync_replicas(replicas) == min_isr
    assert topology().kernel.broker_configs(replicas)[topology().kernel.name]["min.insync.replicas"] == str(min_isr)


def test_only_the_configs_that_differ_are_changed() -> None:
    wanted = topology().kernel.broker_configs(3)[topology().kernel.name]
    current: dict[str, str | None] = {**wanted, "retention.ms": "3600000", "segment.bytes": "1024"}
    del current["min.insync.replicas"]
    assert config_changes(wanted, current) == {"retention.ms": str(7 * DAY_MS), "min.insync.replicas": "2"}
    assert config_changes(wanted, {**current, **wanted}) == {}


def test_no_topic_is_compacted_and_dead_letters_outlive_and_outsize_their_topics() -> None:
    for t in topology().all:
        configs = t.broker_configs(1)
        topic, dead = configs[t.name], configs[t.dead_letter]
        assert topic["cleanup.policy"] == "delete"  # the state topic's key (node) carries four kinds
        assert int(dead["retention.ms"]) > int(topic["retention.ms"]) >= 3 * DAY_MS
        assert int(dead["max.message.bytes"]) >= int(topic["max.message.bytes"]) * 4 // 3
