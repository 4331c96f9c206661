"""`xidpipe policy test` decides a quarantine_gpu rule as the responder does: the GPU's device, its
rule and effect, or the cordon it falls back to, and the breaker's GPU share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
UUID = "GPU-5d8c2a1e-0b7f-4c1e-9a33-51f0c2d4e8aa"


def decide(policy: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "xidpipe.cli", "policy", "test", "--policy", str(policy), "--xid",
                           "48", "--node", "gpu-a-017", "--gpu", UUID, *args], capture_output=True, text=True,
                          timeout=120, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_policy_test_decides_a_quarantine(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("rules: [{name: dbe, match: {xids: [48]}, action: quarantine_gpu, effect: NoExecute}]\n")
    held = decide(policy, "--device", "gpu-3")
    assert (held["quarantine"], held["cordon"], held["effect"]) == (True, False, "NoExecute")
    assert held["device"] == {"driver": "gpu.nvidia.com", "pool": "gpu-a-017", "device": "gpu-3"}
    assert held["rule_name"] == "xidpipe-gpu-5d8c2a1e-0b7f-4c1e-9a33-51f0c2d4e8aa"
    fallback = decide(policy)
    assert (fallback["quarantine"], fallback["cordon"]) == (False, True)
    assert fallback["fallback"] == "no --device given: the GPU is no DRA device here"
    full = decide(policy, "--device", "gpu-3", "--pool-gpus", "80", "--pool-gpus-quarantined", "8")
    assert full["outcome"] == "trip_breaker" and "8 of 80 GPUs quarantined by xidpipe" in full["reason"]
