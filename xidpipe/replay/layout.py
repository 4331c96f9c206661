"""A recorded cluster on disk: the replay directory's layout, its version, and clear errors.

    DIR/
      <node>.log      one kernel log per node, in any format `xidpipe parse` reads; <node> a node name
      state.jsonl     node records (inventories, pod assignments, processes), one JSON object a line
      replay.json     optional: {"format": "xidpipe-replay", "version": 1,
                                 "node_labels": {node: {label: value}}, "pool_nodes": {pool: count}}

A directory without `replay.json` is version 1. A later, incompatible layout writes its own
version there; a replay that does not know that version refuses the directory (it never guesses).

Every file read is a regular file inside DIR: a symbolic link may point within DIR, never out of it
(a recorded cluster from elsewhere must not make replay read `/etc/passwd`), and a FIFO or a device is
refused before it is opened (a FIFO would block the replay for ever). Every time in the state file
lies within the years `models.kernlog.clock` bounds, every integer within 64 bits and every float is
finite; a record out of range is refused naming its line.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from models.kernlog.clock import YEAR_MAX, YEAR_MIN, time_in_range
from models.node_names import node_name_problem
from models.node_records import NodeRecord
from models.wire import decode_node_record

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


INT_MAX = 2**63 - 1  # integers of a node record: SQL stores signed 64-bit


def _inside(root: Path, path: Path) -> None:
    """ReplayInputError unless `path` (a name in `root`) is a regular file that resolves inside `root`."""
    real_root = root.resolve()
    target = path.resolve()
    if path.is_symlink() and target != real_root and real_root not in target.parents:
        raise ReplayInputError(f"cannot read {path}: a symbolic link out of {root} (to {target})")
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ReplayInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise ReplayInputError(f"cannot read {path}: it is a directory")
    if not stat.S_ISREG(mode):
        raise ReplayInputError(f"cannot read {path}: not a regular file (a FIFO, socket or device)")


def _readable(path: Path) -> None:
    _inside(path.parent, path)
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
    for node, path in logs.items():  # a file name names a node, as a Kubernetes node name (`models.node_names`)
        if (problem := node_name_problem(node)) is not None:
            raise ReplayInputError(f"{path}: {problem}")
    for path in logs.values():
        _readable(path)
    state = root / STATE_FILE
    if state.is_symlink() or state.exists():
        _readable(state)
    manifest = root / MANIFEST_FILE
    if manifest.is_symlink() or manifest.exists():
        _readable(manifest)
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


def out_of_range(value: object, where: str = "") -> str | None:
    """Where in `value` (a record's fields as Python values) a time, integer or float is out of range, and
    why; None when nothing is."""
    if isinstance(value, datetime):
        return None if time_in_range(value) else f"{where or 'a time'}: {value.isoformat()} is out of range " \
                                                    f"(years {YEAR_MIN}-{YEAR_MAX} in UTC)"
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -INT_MAX <= value <= INT_MAX else f"{where or 'a number'}: an integer out of range (64 bits)"
    if isinstance(value, float):
        return None if math.isfinite(value) and abs(value) <= INT_MAX else f"{where or 'a number'}: out of range"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        problem = out_of_range(item, f"{where}.{key}" if where else str(key))
        if problem:
            return problem
    return None


def _state_record(path: Path, n: int, line: str) -> NodeRecord:
    rec = _decode_state_record(path, n, line)
    problem = out_of_range(rec.model_dump())
    if problem:
        raise ReplayInputError(f"{path}:{n}: not a node record: {problem}")
    return rec


def _decode_state_record(path: Path, n: int, line: str) -> NodeRecord:
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
