"""`run_pipeline_once`, the demo's entry point: the bundled sample cluster's kernel logs, published
as the node agent publishes a log file, become the incidents `xidpipe scan` finds in them."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from models.kernlog.parser import KernelLogParser
from models.node_records import KernelLine
from models.scan import scan
from streams.runner import run_pipeline_once

SAMPLES = Path(__file__).resolve().parents[2] / "xidpipe" / "samples" / "cluster"


def file_records(path: Path) -> list[KernelLine]:
    node = path.stem
    out: list[KernelLine] = []
    offset = 0
    for raw in path.read_bytes().splitlines(keepends=True):
        line = raw.rstrip(b"\n").decode()
        digest = hashlib.sha256(raw).hexdigest()[:16]
        out.append(KernelLine(node=node, record_id=f"file:{digest}:{offset}", source="file", message=line,
                              fault="NVRM" in line or "SXid" in line or "AER" in line, file_path=str(path),
                              file_offset=offset, observed_at=datetime.now(UTC)))
        offset += len(raw)
    return out


def test_sample_cluster_replay_matches_scan(kafka_bootstrap: str, postgres_database: str, tmp_path: Path) -> None:
    files = sorted(SAMPLES.glob("*.log"))
    records = [r for f in files for r in file_records(f)]
    incidents = run_pipeline_once(kafka_bootstrap, postgres_database, records, timeout=120, workdir=tmp_path)

    parsed = []
    for f in files:
        parsed += [(f.stem, rec) for rec in KernelLogParser().parse(f.read_text().splitlines())]
    # Without node state (no pods) the jobs' faults stay on their GPUs: 7 incidents, each with the same
    # fingerprint, family, count and verdict in the stream as in `xidpipe scan`.
    expected = {i.fingerprint: (i.host, i.family, i.pci, i.count, i.category) for i in scan(parsed)}
    got = {i["fingerprint"]: (i["node"], i["family"], i["pci"], i["count"], i["category"]) for i in incidents}
    assert len(incidents) == len(expected) == 7
    assert got == expected
    by_key = {(i["node"], i["family"]): i for i in incidents}
    assert by_key[("gpu-node-02", "memory")]["serial"] == "1654923008817"
    assert by_key[("gpu-node-03", "gpu_lost")]["gpu_uuid"] == "GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63"
