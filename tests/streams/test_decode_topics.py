"""Topology declarations and the decoding that sends bad messages to the dead-letter topic."""

from __future__ import annotations

import base64
import json

import pytest

from models.dead_letter import DeadLetter
from models.node_records import KERNEL_TOPIC, STATE_TOPIC, encode_node_record
from models.topics import topology
from streams.decode import decode_message
from tests.streams.records import T0, Kmsg, inventory


def test_topology_is_co_partitioned_with_dead_letter_twins() -> None:
    topo = topology("t-", partitions=6)
    names = [n for t in topo.all for n in t.names]
    assert len(names) == len(set(names)) == 16
    assert {t.partitions for t in topo.all} == {6}
    assert all(t.key == "node" for t in topo.inputs if t is not topo.state)
    assert topo.state.key.startswith("node/kind")
    assert all(t.dead_letter == f"{t.name}.dlq" for t in topo.all)
    assert topo.kernel.name == f"t-{KERNEL_TOPIC}"
    assert topo.actions.name == "t-xidpipe.actions" and topo.completed.name == "t-xidpipe.actions.completed"
    assert topo.kinds_for(topo.kernel.name) == {"kernel_line", "kernel_gap"}
    assert topo.kinds_for(topo.state.name) >= {"inventory", "pod_assignments", "gpu_processes"}
    assert not any("repartition" in n for n in names)
    # the kube topic is read like the node topics but written by the responder, not by an agent
    assert topo.kube in topo.inputs and topo.kube not in topo.agent_inputs
    assert topo.kinds_for(topo.kube.name) == {"kube_gpu_view"}
    assert topo.kinds_for(topo.nvml.name) >= {"gpu_health", "node_gpu_health"}


KERNEL_KINDS = frozenset({"kernel_line", "kernel_gap"})
GOOD = Kmsg("node-1").xid(0, 79, T0)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"node-1", b"\xff\xfe not json", "undecodable"),
        (b"node-1", b'{"kind": "kernel_line", "node": "node-1"}', "invalid"),
        (b"node-1", b'{"kind": "martian", "node": "node-1", "record_id": "x"}', "invalid"),
        (b"node-1", None, "empty"),
        (b"node-1", encode_node_record(inventory("node-1", T0)), "wrong_topic"),
        (b"node-2", encode_node_record(GOOD), "wrong_key"),
        (None, encode_node_record(GOOD), "wrong_key"),
    ],
)
def test_bad_messages_become_dead_letters(key: bytes | None, value: bytes | None, reason: str) -> None:
    out = decode_message(topic=KERNEL_TOPIC, partition=1, offset=42, key=key, value=value, kinds=KERNEL_KINDS)
    assert isinstance(out, DeadLetter)
    assert out.reason == reason
    body = json.loads(out.to_json())
    assert (body["topic"], body["partition"], body["offset"], body["reason"]) == (KERNEL_TOPIC, 1, 42, reason)
    assert body["error"]
    if value is not None:
        assert base64.b64decode(body["value_b64"]) == value
    assert dict(out.headers())["xidpipe-dlq-reason"] == reason.encode()


def test_good_message_decodes() -> None:
    out = decode_message(topic=KERNEL_TOPIC, partition=0, offset=0, key=b"node-1", value=encode_node_record(GOOD),
                         kinds=KERNEL_KINDS)
    assert not isinstance(out, DeadLetter)
    assert out == GOOD
    state = decode_message(topic=STATE_TOPIC, partition=0, offset=0, key=b"node-1",
                           value=encode_node_record(inventory("node-1", T0)), kinds=frozenset({"inventory"}))
    assert not isinstance(state, DeadLetter) and state.kind == "inventory"
