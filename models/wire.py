"""Node records on the wire: every record kind, with its topic and whether a full agent spool may drop
it, and decoding.

The kinds are those of `models.node_records` (what the agent publishes itself) and those of the health
signals (`models.signals`, one folder per signal). This module imports both registries, so what it
answers covers every kind; `models.node_records` never imports the signals (they build on it).
"""

from __future__ import annotations

import models.signals  # noqa: F401  (registers the health signals' record kinds)
from models.node_records import NodeRecordBase, RecordKind, registered_adapter, registered_kinds


def record_kind(kind: str) -> RecordKind:
    """The registration of a record kind; KeyError for a kind nobody registered."""
    return registered_kinds()[kind]


def topic_for(record: NodeRecordBase) -> str:
    return record_kind(record.kind).topic


def kinds_on(topic: str) -> frozenset[str]:
    """The record kinds valid on a node topic (`models.node_records.NODE_TOPICS`)."""
    return frozenset(kind for kind, entry in registered_kinds().items() if entry.topic == topic)


def decode_node_record(data: bytes | str) -> NodeRecordBase:
    """Decode one record of a registered kind; raises pydantic.ValidationError for anything else."""
    record: NodeRecordBase = registered_adapter().validate_json(data)
    return record
