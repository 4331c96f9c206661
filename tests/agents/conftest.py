"""Helpers for the node agent's tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")


def missing(reason: str) -> None:
    """A test that cannot reach what it needs fails under CI and skips elsewhere."""
    if os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}:
        pytest.fail(reason)
    pytest.skip(reason)


def require_tool(path_or_name: str | Path, package: str) -> str:
    found = shutil.which(str(path_or_name)) or (str(path_or_name) if Path(path_or_name).is_file() else None)
    if found is None:
        missing(f"{path_or_name} not found: apt-get install -y {package}")
    assert found is not None
    return found


def consume(
    bootstrap: str,
    topic: str,
    *,
    until: Callable[[list[dict[str, Any]]], bool],
    timeout_s: float = 60.0,
) -> list[dict[str, Any]]:
    """Every record of `topic` from the beginning, decoded, until `until(records)` or the deadline."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        parts = None
        while not parts and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                time.sleep(0.2)
        if parts:
            consumer.assign([TopicPartition(topic, p) for p in parts])
            consumer.seek_to_beginning()
            while time.monotonic() < deadline and not until(records):
                for batch in consumer.poll(timeout_ms=200).values():
                    records.extend(json.loads(r.value) for r in batch)
    finally:
        consumer.close()
    return records


@pytest.fixture
def unique_node(request: pytest.FixtureRequest) -> str:
    """A node name of its own for the test (an RFC 1123 name: the test's name, lower case, `-` for the rest)."""
    name = re.sub(r"[^a-z0-9-]+", "-", request.node.name[:40].lower()).strip("-")
    return f"node-{name}-{time.time_ns() % 10**9}"


def find_nvml_header() -> Path | None:
    """nvml.h from the nvidia-nvml-dev wheel (nvidia/<cuda>/include/nvml.h in site-packages)."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    for base in list(spec.submodule_search_locations or []) if spec else []:
        for header in sorted(Path(base).glob("*/include/nvml.h")):
            return header
    return None


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compile tests/fakes/nvml/fake_nvml.c into <dir>/libnvidia-ml.so.1; returns <dir>."""
    import subprocess

    gcc = require_tool("gcc", "gcc")
    header = find_nvml_header()
    if header is None:
        missing("nvml.h not found: pip install nvidia-nvml-dev (a dev dependency)")
    assert header is not None
    out = tmp_path_factory.mktemp("fake-nvml")
    source = Path(__file__).resolve().parents[1] / "fakes" / "nvml" / "fake_nvml.c"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-Wno-unused-parameter", f"-I{header.parent}",
         "-o", str(out / "libnvidia-ml.so.1"), str(source), "-lpthread"],
        check=True, capture_output=True, text=True,
    )
    return out
