"""The one configuration model: names, the order of the sources, the config file, removed names."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.settings import AgentSettings
from respond.cordon.settings import ActionSettings
from respond.settings import RespondSettings
from respond.sinks.settings import SinkSettings
from service.config import SHARED_KEYS, ConfigError, env_name, keys_of, setting_key, settings_fields, use_config_file
from streams.settings import WorkerSettings
from xidpipe.commands.cli_settings import CliSettings
from xidpipe.commands.config import classes
from xidpipe.commands.serve_settings import ServeSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("XIDPIPE_") and not name.startswith("XIDPIPE_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("NODE_NAME", raising=False)
    use_config_file(None)
    yield
    use_config_file(None)


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xidpipe.yaml"
    path.write_text(text)
    use_config_file(path)
    return path


def test_flags_over_environment_over_file_over_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config(tmp_path, "cluster: from-file\ntopic_prefix: file.\nworker_app_id: file-app\npartitions: 4\n")
    monkeypatch.setenv("XIDPIPE_TOPIC_PREFIX", "env.")
    monkeypatch.setenv("XIDPIPE_WORKER_APP_ID", "env-app")
    st = WorkerSettings(app_id="flag-app")
    assert (st.app_id, st.topic_prefix, st.cluster, st.partitions) == ("flag-app", "env.", "from-file", 4)
    assert st.batch_max == WorkerSettings.model_fields["batch_max"].default


def test_one_name_per_shared_setting_across_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XIDPIPE_DATABASE_URL", "postgresql+psycopg://db/x")
    monkeypatch.setenv("XIDPIPE_BOOTSTRAP_SERVERS", "k1:9092")
    monkeypatch.setenv("XIDPIPE_CLUSTER", "prod-east")
    worker, respond = WorkerSettings(), RespondSettings()
    assert worker.database_url == respond.database_url.get_secret_value() == "postgresql+psycopg://db/x"
    assert ServeSettings().database_url == "postgresql+psycopg://db/x"
    cli = CliSettings().database_url
    assert cli is not None and cli.get_secret_value() == "postgresql+psycopg://db/x"
    assert {worker.bootstrap_servers, respond.bootstrap_servers, AgentSettings().bootstrap_servers} == {"k1:9092"}
    assert worker.cluster == respond.cluster == "prod-east"


def test_every_setting_has_one_key_and_one_environment_name() -> None:
    owner: dict[str, str] = {}
    for cls in classes():
        for name in settings_fields(cls):
            key = setting_key(cls, name)
            assert env_name(cls, name) == f"XIDPIPE_{key.upper()}"
            if key in SHARED_KEYS:
                continue
            assert key.startswith(f"{cls.service}_"), f"{cls.__name__}.{name}: {key} lacks its service's prefix"
            assert owner.setdefault(key, cls.__name__) == cls.__name__, f"{key} in two settings classes"


def test_each_kafka_principal_has_its_own_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for prefix, user in (("AGENT", "agent"), ("WORKER", "worker"), ("RESPOND", "responder")):
        monkeypatch.setenv(f"XIDPIPE_{prefix}_SECURITY_PROTOCOL", "SASL_SSL")
        monkeypatch.setenv(f"XIDPIPE_{prefix}_SASL_USERNAME", user)
        monkeypatch.setenv(f"XIDPIPE_{prefix}_SASL_PASSWORD", f"pw-{user}")
    users = [(s.sasl_username, s.sasl_password.get_secret_value()) for s in
             (AgentSettings(), WorkerSettings(), RespondSettings()) if s.sasl_password is not None]
    assert users == [("agent", "pw-agent"), ("worker", "pw-worker"), ("responder", "pw-responder")]


def test_nested_values_in_the_file_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config(tmp_path, "worker_policy:\n  quiet_period_s: 60\nsinks_ticket_policy:\n  project: OPS\n")
    assert WorkerSettings().policy.quiet_period_s == 60 and SinkSettings().ticket_policy.project == "OPS"
    monkeypatch.setenv("XIDPIPE_WORKER_POLICY__QUIET_PERIOD_S", "90")
    assert WorkerSettings().policy.quiet_period_s == 90


def test_an_unknown_key_in_the_file_is_named(tmp_path: Path) -> None:
    path = config(tmp_path, "database_url: sqlite:///x.db\nworker_app_idd: typo\n")
    with pytest.raises(ConfigError, match=rf"{path}: unknown setting 'worker_app_idd'"):
        WorkerSettings()
    config(tmp_path, "databse_url: sqlite:///x.db\n")
    for cls in (AgentSettings, WorkerSettings, RespondSettings, ActionSettings, SinkSettings, ServeSettings):
        with pytest.raises(ConfigError, match="unknown setting 'databse_url'"):
            cls()


def test_another_services_key_is_left_to_that_service(tmp_path: Path) -> None:
    config(tmp_path, "agent_source: file\nrespond_group_id: g\nagent_sourse: x\n")
    assert WorkerSettings().app_id == "xidpipe-worker" and RespondSettings().group_id == "g"
    with pytest.raises(ConfigError, match="unknown setting 'agent_sourse'"):
        AgentSettings()


@pytest.mark.parametrize("text", ["- a list\n", "key: [unclosed\n"])
def test_a_file_that_is_not_a_mapping_is_an_error(tmp_path: Path, text: str) -> None:
    config(tmp_path, text)
    with pytest.raises(ConfigError, match=r"xidpipe\.yaml"):
        WorkerSettings()


def test_a_missing_config_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XIDPIPE_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"no config file at .*nope.yaml"):
        RespondSettings()


@pytest.mark.parametrize(("old", "new"), [
    ("XIDPIPE_RESPOND_DATABASE_URL", "XIDPIPE_DATABASE_URL"),
    ("XIDPIPE_ACTIONS_DATABASE_URL", "XIDPIPE_DATABASE_URL"),
    ("XIDPIPE_SINKS_DATABASE_URL", "XIDPIPE_DATABASE_URL"),
    ("XIDPIPE_ACTIONS_CLUSTER", "XIDPIPE_KUBE_CONFIG"),
    ("XIDPIPE_RESPOND_CLUSTER", "XIDPIPE_CLUSTER"),
    ("XIDPIPE_AGENT_BOOTSTRAP_SERVERS", "XIDPIPE_BOOTSTRAP_SERVERS"),
    ("XIDPIPE_SASL_PASSWORD", "XIDPIPE_WORKER_SASL_PASSWORD"),
    ("XIDPIPE_POLICY__QUIET_PERIOD_S", "XIDPIPE_WORKER_POLICY__QUIET_PERIOD_S"),
])
def test_a_removed_name_still_set_names_its_replacement(monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    monkeypatch.setenv(old, "x")
    for cls in (AgentSettings, WorkerSettings, RespondSettings, ActionSettings, SinkSettings):
        with pytest.raises(ConfigError, match=f"^{old} was removed: set {new}") as err:
            cls()
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(("value", "mode", "path"), [
    ("none", "none", None), ("in-cluster", "in-cluster", None),
    ("/etc/kube/config", "kubeconfig", Path("/etc/kube/config")),
])
def test_the_kubernetes_connection_is_a_mode(monkeypatch: pytest.MonkeyPatch, value: str, mode: str,
                                             path: Path | None) -> None:
    monkeypatch.setenv("XIDPIPE_KUBE_CONFIG", value)
    monkeypatch.setenv("XIDPIPE_KUBE_CONTEXT", "ctx")
    st = ActionSettings()
    assert (st.kube_mode, st.kubeconfig_path, st.kube_context) == (mode, path, "ctx")


def test_keys_translate_to_fields() -> None:
    keys = keys_of(AgentSettings)
    assert keys["agent_node"] == "node" and keys["bootstrap_servers"] == "bootstrap_servers"
    assert keys["agent_sasl_password"] == "sasl_password" and keys["log_level"] == "log_level"


def test_a_flag_that_turns_a_setting_off_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from xidpipe.cli import build_parser
    from xidpipe.commands.agent import settings_from_args

    monkeypatch.setenv("XIDPIPE_AGENT_METRICS_PORT", "9999")
    assert settings_from_args(build_parser().parse_args(["agent", "--source", "file"])).metrics_port == 9999
    st = settings_from_args(build_parser().parse_args(["agent", "--no-metrics", "--source", "file"]))
    assert st.metrics_port is None and st.source == "file"


def test_the_responder_is_one_settings_object_with_one_database(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config(tmp_path, "actions_dry_run: true\nsinks_group_wait_s: 5\nrespond_group_id: g\n")
    monkeypatch.setenv("XIDPIPE_DATABASE_URL", "postgresql+psycopg://xidpipe:pw-db-42@db/x")
    monkeypatch.setenv("XIDPIPE_ACTIONS_API_DEADLINE_S", "7")
    monkeypatch.setenv("XIDPIPE_SINKS_OUTBOX_DIR", "/srv/outbox")
    st = RespondSettings()
    # Its sections, read under their own names, from the file and the environment alike.
    assert (st.group_id, st.actions.dry_run, st.actions.api_deadline_s) == ("g", True, 7.0)
    assert (st.sinks.group_wait_s, st.sinks.outbox_dir) == (5.0, Path("/srv/outbox"))
    # One database, kept secret: no section has a URL of its own.
    assert st.database == "postgresql+psycopg://xidpipe:pw-db-42@db/x" and "pw-db-42" not in repr(st)
    assert "database_url" not in ActionSettings.model_fields and "database_url" not in SinkSettings.model_fields
    # A section is never read under the responder's prefix: that is not a name of it.
    monkeypatch.setenv("XIDPIPE_RESPOND_ACTIONS__DRY_RUN", "false")
    assert RespondSettings().actions.dry_run is True
    config(tmp_path, "respond_actions: {dry_run: false}\n")
    with pytest.raises(ConfigError, match="unknown setting 'respond_actions'"):
        RespondSettings()


def test_a_bad_section_value_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from xidpipe.commands.exits import UsageError
    from xidpipe.commands.startup import load

    monkeypatch.setenv("XIDPIPE_SINKS_GROUP_WAIT_S", "-1")
    with pytest.raises(UsageError, match=r"^bad configuration \(SinkSettings\): group_wait_s: ") as err:
        load(RespondSettings)
    assert "\n" not in str(err.value)


def test_the_command_line_reads_its_database_from_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from history.database import DEFAULT_DB
    from xidpipe.commands.cli_settings import configured_database, history_database

    none = argparse.Namespace(database_url=None)
    assert configured_database(none) is None and history_database(none) == DEFAULT_DB
    config(tmp_path, "database_url: sqlite:///from-file.db\n")
    assert history_database(none) == "sqlite:///from-file.db"
    monkeypatch.setenv("XIDPIPE_DATABASE_URL", "sqlite:///from-env.db")
    assert history_database(none) == "sqlite:///from-env.db"
    assert history_database(argparse.Namespace(database_url="sqlite:///flag.db")) == "sqlite:///flag.db"
