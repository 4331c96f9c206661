"""A bounded coverage-guided fuzz run of the parser (atheris, libFuzzer), seeded with the real-world
corpus: no exception, no record with a number out of range or a code not written in its lines, the
line and the stream API agree, and no input costs more than linear time (see parser_fuzz.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = 30000  # inputs per CI run (about 30 s); libFuzzer's fixed seed makes the run repeatable
MAX_TOTAL_S = 45  # and never longer than this


def test_fuzzing_the_parser_finds_nothing(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    corpus = ROOT / "tests/models/corpus/real_world.jsonl"
    for i, case in enumerate(json.loads(x) for x in corpus.read_text(encoding="utf-8").splitlines() if x.strip()):
        (seeds / f"case{i}").write_bytes(b"\x00" + "\n".join(case["lines"]).encode("utf-8"))
    artifacts = tmp_path / "findings"
    artifacts.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, str(ROOT / "tests/models/parser_fuzz.py"), f"-runs={RUNS}", f"-max_total_time={MAX_TOTAL_S}",
         "-seed=1", "-timeout=5", "-max_len=8192", "-rss_limit_mb=4096", f"-artifact_prefix={artifacts}/",
         str(seeds)],
        capture_output=True, text=True, env=env, timeout=MAX_TOTAL_S + 60, check=False,
    )
    found = sorted(p.name for p in artifacts.iterdir())
    assert run.returncode == 0 and not found, (found, run.stderr[-4000:])
    assert "Done" in run.stderr or "DONE" in run.stderr, run.stderr[-2000:]
