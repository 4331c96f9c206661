"""A recorded cluster on disk: the replay directory's layout, its version, and clear errors.

    DIR/
      <node>.log      one kernel log per node, in any format `xidpipe parse` reads
      state.jsonl     node records (inventories, pod assignments, processes), one JSON object a line
      replay.json     optional: {"format": "xidpipe-replay", "version": 1,
                                 "node_labels": {node: {label: value}}, "pool_nodes": {pool: count}}

A directory without `replay.json` is version 1. A later, incompatible layout writes its own
version there; a replay that does not know that version refuses the directory (it never guesses).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from models.node_records import NodeRecord, decode_node_record

LAYOUT_FORMAT = "xidpipe-replay"
LAYOUT_VERSIONS = frozenset({1})
STATE_FILE = "state.jsonl"
MANIFEST_FILE = "replay.json"
LOG_SUFFIX = ".log"


class ReplayInputError(Exception):
    """The recorded cluster cannot be read; the message names the file and the reason."""


@dataclass(frozen=True, slots=True)
class ClusterDir:
    """A replay directory as read: its nodes' logs, its state file, the labels of its nodes."""

    root: Path
    version: int
    logs: dict[str, Path]  # node → its kernel log
    state: Path | None
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    pool_nodes: dict[str, int] = field(default_factory=dict)  # pool → its real size, when more than recorded

    @property
    def nodes(self) -> list[str]:
        return sorted(self.logs)


def _readable(path: Path) -> None:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except IsADirectoryError:
        raise ReplayInputError(f"cannot read {path}: it is a directory") from None
    except PermissionError:
        raise ReplayInputError(f"cannot read {path}: permission denied") from None
    except OSError as exc:
        raise ReplayInputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _manifest(path: Path) -> tuple[int, dict[str, dict[str, str]], dict[str, int]]:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ReplayInputError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format", LAYOUT_FORMAT) != LAYOUT_FORMAT:
        raise ReplayInputError(f"{path}: not a replay manifest (expected \"format\": \"{LAYOUT_FORMAT}\")")
    version = data.get("version", 1)
    if version not in LAYOUT_VERSIONS:
        known = ", ".join(str(v) for v in sorted(LAYOUT_VERSIONS))
        raise ReplayInputError(f"{path}: layout version {version!r} is not one this xidpipe reads ({known})")
    labels = data.get("node_labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) and all(isinstance(x, str) and isinstance(y, str)
                                                            for x, y in v.items())
        for k, v in labels.items()
    ):
        raise ReplayInputError(f"{path}: node_labels must map node names to {{label: value}} strings")
    pools = data.get("pool_nodes", {})
    if not isinstance(pools, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                              and v >= 0 for k, v in pools.items()):
        raise ReplayInputError(f"{path}: pool_nodes must map pool names to node counts")
    return int(version), labels, pools


def open_cluster_dir(root: Path) -> ClusterDir:
    """Check the layout of `root` and list what it holds; ReplayInputError names what is wrong."""
    if not root.exists():
        raise ReplayInputError(f"cannot read {root}: no such directory")
    if not root.is_dir():
        raise ReplayInputError(f"cannot read {root}: not a directory")
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise ReplayInputError(f"cannot read {root}: {exc.strerror or exc}") from None
    logs = {e.name[: -len(LOG_SUFFIX)]: Path(e.path) for e in entries
            if e.name.endswith(LOG_SUFFIX) and len(e.name) > len(LOG_SUFFIX)}
    if not logs:
        raise ReplayInputError(f"{root}: no kernel logs (one <node>{LOG_SUFFIX} per node) in the directory")
    for path in logs.values():
        _readable(path)
    state = root / STATE_FILE
    if state.exists():
        _readable(state)
    manifest = root / MANIFEST_FILE
    version, labels, pools = _manifest(manifest) if manifest.exists() else (1, {}, {})
    return ClusterDir(root, version, logs, state if state.exists() else None, labels, pools)


def record_time(rec: NodeRecord) -> datetime:
    """When a node record became true: a pod assignment's change time, else when it was emitted."""
    changed = getattr(rec, "changed_at", None)
    at = changed if isinstance(changed, datetime) else rec.emitted_at
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # as the stream reads a time without zone


def state_records(cluster: ClusterDir) -> list[NodeRecord]:
    """The state file's records in time order (read whole: snapshots are written only on change)."""
    return read_state(cluster.state) if cluster.state is not None else []


def read_state(path: Path) -> list[NodeRecord]:
    """A state file's node records (one JSON object a line) in time order; ReplayInputError names
    the line that is not a node record."""
    out: list[tuple[datetime, int, NodeRecord]] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                rec = _state_record(path, n, line)
                out.append((record_time(rec), n, rec))
    except IsADirectoryError:
        raise ReplayInputError(f"cannot read {path}: it is a directory") from None
    except OSError as exc:
        raise ReplayInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    out.sort(key=lambda t: (t[0], t[1]))
    return [rec for _, _, rec in out]


def _state_record(path: Path, n: int, line: str) -> NodeRecord:
    try:
        return decode_node_record(line)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ReplayInputError(f"{path}:{n}: not a node record: {first['msg']}{f' at {where}' if where else ''}") \
            from None
    except ValueError as exc:
        raise ReplayInputError(f"{path}:{n}: not a node record: {exc}") from None


def iter_state(records: list[NodeRecord]) -> Iterator[tuple[datetime, int, NodeRecord]]:
    """The state records as merge entries: (time, 0, record); 0 puts state first at equal times."""
    for rec in records:
        yield record_time(rec), 0, rec
