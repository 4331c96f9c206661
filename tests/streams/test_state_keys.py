"""Record keys: the state topic's records are keyed (node, kind) so that compaction keeps each kind's
latest; the worker's key checks (decode, node identity) read the node part and still refuse a key that
names another node or kind."""

from __future__ import annotations

import asyncio

import pytest

from models.dead_letter import DeadLetter
from models.node_identity import DEFAULT_AGENT_ACCOUNT, TOKEN_HEADER, TokenReview
from models.node_records import STATE_TOPIC, NodeRecord, SpoolDrops, encode_node_record
from models.topics import key_names_record, key_node, record_key, topology
from streams.decode import decode_message
from streams.node_identity import NodeIdentityGate
from tests.streams.records import T0, Kmsg, inventory, pods, processes, workloads

STATE_KINDS = topology().kinds_for(STATE_TOPIC)
STATE = [inventory("node-1", T0), pods("node-1", T0, {0: ("ns", "p", "c")}, {}), processes("node-1", T0, {0: 7}),
         SpoolDrops(node="node-1", record_id="d1", dropped_total=3, dropped_since_last=3),
         workloads("node-1", T0, {("ns", "p"): ("JobSet", "jobset.x-k8s.io", "trainer")})]


def test_every_state_kind_has_its_own_key_and_other_records_are_keyed_by_node() -> None:
    assert {r.kind for r in STATE} == STATE_KINDS
    assert [record_key(r) for r in STATE] == [f"node-1/{r.kind}" for r in STATE]
    assert record_key(Kmsg("node-1").xid(0, 79, T0)) == "node-1"
    assert {key_node(record_key(r).encode()) for r in STATE} == {b"node-1"}
    assert key_node(b"node-1") == b"node-1"


@pytest.mark.parametrize("record", STATE, ids=lambda r: r.kind)
def test_a_state_record_is_accepted_keyed_by_node_and_kind_or_by_its_node_alone(record: NodeRecord) -> None:
    for key in (f"node-1/{record.kind}".encode(), b"node-1"):  # the node alone: records written before
        out = decode_message(topic=STATE_TOPIC, partition=0, offset=1, key=key,
                             value=encode_node_record(record), kinds=STATE_KINDS)
        assert out == record


@pytest.mark.parametrize("key", [b"node-2/inventory", b"node-1/gpu_processes", b"node-1/", b"node-1/inventory/x",
                                 b"node-10/inventory", b"node-1inventory", None])
def test_a_state_key_that_names_another_node_or_kind_is_a_dead_letter(key: bytes | None) -> None:
    record = STATE[0]
    assert not key_names_record(key, record)
    out = decode_message(topic=STATE_TOPIC, partition=0, offset=1, key=key, value=encode_node_record(record),
                         kinds=STATE_KINDS)
    assert isinstance(out, DeadLetter) and out.reason == "wrong_key" and out.key == key


def test_node_identity_judges_the_node_a_state_key_names() -> None:
    class Reviews:
        def review(self, token: str) -> TokenReview:
            return TokenReview(True, DEFAULT_AGENT_ACCOUNT, "node-1", ("xidpipe",))

    gate = NodeIdentityGate(Reviews(), account=DEFAULT_AGENT_ACCOUNT, audience="xidpipe")
    headers = [(TOKEN_HEADER, b"t")]

    async def reasons() -> list[str]:
        keys = (b"node-1/inventory", b"node-1", b"node-2/inventory", b"node-1/../node-2", b"node-1/inventory/x")
        return [(await gate.check(k, headers)).reason for k in keys]

    # node-1's token once passed `node-1/../node-2`: the key's node part was read up to the first separator.
    assert asyncio.run(reasons()) == ["verified", "verified", "node_mismatch", "invalid_key", "invalid_key"]
