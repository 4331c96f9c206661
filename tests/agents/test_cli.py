import subprocess
import sys
from pathlib import Path

from xidpipe.cli import build_parser
from xidpipe.commands.agent import settings_from_args


def test_help_lists_the_sources_and_switches() -> None:
    out = subprocess.run([sys.executable, "-m", "xidpipe.cli", "agent", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for word in ("--source", "kmsg,journald,file", "--replay-rate", "--bootstrap-servers", "--state-dir", "--no-nvml",
                 "--podresources-socket", "--metrics-port", "--node"):
        assert word in out


def test_options_become_settings(tmp_path: Path) -> None:
    args = build_parser().parse_args([
        "agent", "--source", "file", "--log-file", str(tmp_path / "k.log"), "--replay-rate", "250", "--no-follow",
        "--node", "gpu-7", "--bootstrap-servers", "k1:9092,k2:9092", "--state-dir", str(tmp_path), "--no-nvml",
        "--spool-max-mb", "64", "--no-metrics",
    ])
    s = settings_from_args(args)
    assert (s.source, s.replay_rate, s.follow, s.node, s.nvml_enabled) == ("file", 250.0, False, "gpu-7", False)
    assert s.bootstrap_servers == "k1:9092,k2:9092" and s.spool_max_bytes == 64 * 1024 * 1024
    assert s.metrics_port is None and s.podresources_enabled is True
    assert s.evidence_enabled is False  # a replay's evidence would describe this host, not the log's
