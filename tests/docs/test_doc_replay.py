"""docs/replay.md's layout is the one `xidpipe replay` reads: its example manifest, and the sample
directory it names as one."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.docs.doctext import ROOT, text_of
from xidpipe.replay.layout import MANIFEST_FILE, open_cluster_dir

SAMPLE = ROOT / "xidpipe" / "samples" / "cluster"


def test_the_sample_cluster_is_the_layout_the_docs_describe() -> None:
    doc = " ".join(text_of(ROOT / "docs" / "replay.md").split())
    assert "`xidpipe/samples/cluster/` is such a directory, without a `replay.json`" in doc
    cluster = open_cluster_dir(SAMPLE)
    assert not (SAMPLE / MANIFEST_FILE).exists() and cluster.version == 1 and cluster.node_labels == {}
    assert cluster.nodes == sorted(p.stem for p in SAMPLE.glob("*.log")) and cluster.state == SAMPLE / "state.jsonl"


def test_the_example_manifest_is_read_as_written(tmp_path: Path) -> None:
    text = text_of(ROOT / "docs" / "replay.md")
    [example] = re.findall(r"A `replay.json` that puts one node in a pool of 400:\s*```json\n(.*?)```", text, re.S)
    recorded = tmp_path / "cluster"
    shutil.copytree(SAMPLE, recorded, ignore=shutil.ignore_patterns("evidence"))
    (recorded / MANIFEST_FILE).write_text(example)
    cluster = open_cluster_dir(recorded)
    assert cluster.node_labels == {"gpu-node-01": {"xidpipe.io/pool": "train-h200"}}
    assert cluster.pool_nodes == {"train-h200": 400} and cluster.version == 1
