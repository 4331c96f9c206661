"""Decode the node records arriving on the input topics, or say why a message is a dead letter.

Every registered record kind decodes (`models.wire`: the agent's own kinds of `models.node_records` and
the health signals' of `models.signals`); a kind nobody registered is an invalid record. A message that
is no record of its topic is a dead letter (`models.dead_letter`), with the reason."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError

from models.dead_letter import DeadLetter
from models.node_records import NodeRecord
from models.topics import key_names_record
from models.wire import decode_node_record


def decode_message(
    *, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, kinds: frozenset[str]
) -> NodeRecord | DeadLetter:
    """The node record in a message, or a DeadLetter saying why not.

    A record must decode against the schemas, be of a kind that belongs on `topic`, and be keyed by
    its node, or by its node and kind on the state topic (`models.topics.record_key`: the node part
    decides the partition, and with it which worker holds the node's state).
    """

    def dead(reason: str, error: str) -> DeadLetter:
        return DeadLetter(reason, error, topic, partition, offset, key, value, datetime.now(UTC))

    if value is None:
        return dead("empty", "the message has no value (a tombstone)")
    try:
        record = decode_node_record(value)
    except ValidationError as exc:
        types = [e["type"] for e in exc.errors()]
        kind = "undecodable" if types and types[0] in ("json_invalid", "json_type") else "invalid"
        return dead(kind, str(exc))
    except (UnicodeDecodeError, ValueError) as exc:
        return dead("undecodable", f"{type(exc).__name__}: {exc}")
    if kinds and record.kind not in kinds:
        return dead("wrong_topic", f"a {record.kind} record does not belong on {topic}")
    if not key_names_record(key, record):
        node_key = key.decode("utf-8", "replace") if key is not None else None
        return dead("wrong_key", f"record of node {record.node!r} keyed {node_key!r}: records are keyed by node "
                                 "(state records by node/kind)")
    return record
