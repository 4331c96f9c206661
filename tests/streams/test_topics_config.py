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


def test_node_state_is_compacted_only_past_the_weekend_window_and_the_rest_is_deleted() -> None:
    topo = topology()
    kernel_retention = int(topo.kernel.broker_configs(1)[topo.kernel.name]["retention.ms"])
    for t in topo.all:
        configs = t.broker_configs(1)
        topic, dead = configs[t.name], configs[t.dead_letter]
        assert dead["cleanup.policy"] == "delete" and int(dead["retention.ms"]) >= 30 * DAY_MS
        assert int(dead["max.message.bytes"]) >= int(topic["max.message.bytes"]) * 4 // 3
        if t is topo.state:
            continue
        assert topic["cleanup.policy"] == "delete" and "min.compaction.lag.ms" not in topic
        assert int(dead["retention.ms"]) > int(topic["retention.ms"]) >= 3 * DAY_MS
    state = topo.state.broker_configs(1)[topo.state.name]
    assert state["cleanup.policy"] == "compact"
    assert state["retention.ms"] == "-1"  # nothing is deleted by age: the latest state of each key stays
    # Every state change is kept as long as the kernel lines it attributes, past a weekend (Fri 18:00-Mon 09:00).
    assert int(state["min.compaction.lag.ms"]) == kernel_retention >= 63 * 3_600_000
    assert int(state["segment.ms"]) <= DAY_MS  # records are compacted within a day after the window
