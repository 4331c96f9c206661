"""`xidpipe worker` options and the worker's settings from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.stream_policy import PipelinePolicy
from streams.runner import worker_env
from streams.settings import WorkerSettings
from xidpipe.cli import build_parser


def test_defaults_are_local_kafka_and_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("XIDPIPE_"):
            monkeypatch.delenv(name)
    st = WorkerSettings()
    assert st.bootstrap_servers == "127.0.0.1:9092"
    assert st.database_url == "sqlite:///var/xidpipe.db"
    assert st.policy == PipelinePolicy()


def test_environment_with_nested_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XIDPIPE_BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("XIDPIPE_WORKER_POLICY__QUIET_PERIOD_S", "60")
    monkeypatch.setenv("XIDPIPE_WORKER_POLICY__FLEET_FAMILIES", '["gpu_lost"]')
    st = WorkerSettings()
    assert st.bootstrap_servers == "k1:9092,k2:9092"
    assert st.policy.quiet_period_s == 60 and st.policy.fleet_families == ("gpu_lost",)


def test_a_removed_cordon_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XIDPIPE_WORKER_POLICY__CORDON_AFTER_REPEATS", "2")
    with pytest.raises(ValueError, match="cordon_after_repeats: removed; cordons are decided by the YAML cordon"):
        WorkerSettings()


def test_worker_env_round_trips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    st = WorkerSettings(app_id="x", topic_prefix="p.", datadir=tmp_path, web_enabled=True,
                        policy=PipelinePolicy(fleet_min_nodes=5, fleet_families=("gpu_lost",)))
    for key, value in worker_env(st).items():
        if key.startswith("XIDPIPE_"):
            monkeypatch.setenv(key, value)
    assert WorkerSettings() == st


def test_worker_command_is_registered() -> None:
    args = build_parser().parse_args(["worker", "--bootstrap-servers", "h:1", "--partitions", "4"])
    assert args.command == "worker" and args.bootstrap_servers == "h:1" and args.partitions == 4
    assert callable(args.func)
