"""`xidpipe config show` (values, sources, masked secrets) and the settings reference in
docs/configuration.md, which must be the model's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from xidpipe.commands.config import reference_markdown

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def show(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_") or k.startswith("XIDPIPE_TEST_")}
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], env={**clean, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def test_show_names_each_source_and_masks_secrets(tmp_path: Path) -> None:
    config = tmp_path / "xidpipe.yaml"
    config.write_text("database_url: postgresql+psycopg://xidpipe:file-pw-123@db:5432/xidpipe\ncluster: from-file\n"
                      "sinks_jira_api_token: jira-tok-456\nsinks_slack_webhooks: {ops: 'https://hooks.example/T/B/x'}\n")
    env = {"XIDPIPE_CONFIG": str(config), "XIDPIPE_RESPOND_SASL_PASSWORD": "kafka-pw-789",
           "XIDPIPE_RESPOND_SECURITY_PROTOCOL": "SASL_SSL", "XIDPIPE_RESPOND_SASL_USERNAME": "responder",
           "XIDPIPE_TOPIC_PREFIX": "env."}
    proc = show("config", "show", "--service", "respond", "--format", "json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, dict[str, dict[str, Any]]] = json.loads(proc.stdout)
    assert set(data) == {"respond", "actions", "sinks"}
    respond, sinks = data["respond"], data["sinks"]
    assert respond["topic_prefix"] == {"value": "env.", "source": "env", "env": "XIDPIPE_TOPIC_PREFIX"}
    assert respond["cluster"]["value"] == "from-file" and respond["cluster"]["source"] == "file"
    assert respond["respond_group_id"] == {"value": "xidpipe-responder", "source": "default",
                                           "env": "XIDPIPE_RESPOND_GROUP_ID"}
    assert respond["respond_sasl_username"]["value"] == "responder"
    assert respond["database_url"]["value"].startswith("postgresql+psycopg://xidpipe:")
    assert sinks["sinks_jira_api_token"]["source"] == "file"
    for secret in ("file-pw-123", "jira-tok-456", "kafka-pw-789", "hooks.example"):
        assert secret not in proc.stdout and secret not in proc.stderr
    flag = show("--database-url", "sqlite:///flag.db", "config", "show", "--service", "worker", env=env, cwd=tmp_path)
    assert re.search(r"^  database_url: sqlite:///flag.db  # flag$", flag.stdout, re.M), flag.stdout
    assert re.search(r"^  topic_prefix: env\.  # env XIDPIPE_TOPIC_PREFIX$", flag.stdout, re.M)
    assert re.search(r"^  cluster: from-file  # file$", flag.stdout, re.M)


def test_show_refuses_a_removed_name_and_an_unknown_key_in_one_line(tmp_path: Path) -> None:
    proc = show("config", "show", env={"XIDPIPE_ACTIONS_DATABASE_URL": "sqlite:///x.db"}, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "xidpipe config: bad configuration: XIDPIPE_ACTIONS_DATABASE_URL was removed: set XIDPIPE_DATABASE_URL instead"]
    config = tmp_path / "c.yaml"
    config.write_text("respond_group_idd: x\n")
    proc = show("--config", str(config), "config", "show", env={}, cwd=tmp_path)
    assert proc.returncode == 2 and "unknown setting 'respond_group_idd'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = show("--config", str(tmp_path / "missing.yaml"), "incidents", "list", env={}, cwd=tmp_path)
    assert proc.returncode == 2 and "no config file at" in proc.stderr


def test_history_commands_read_the_database_url_from_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    missing = tmp_path / "not-there.db"
    config.write_text(f"database_url: sqlite:///{missing}\n")
    proc = show("--config", str(config), "incidents", "list", env={}, cwd=tmp_path)
    assert proc.returncode == 3 and str(missing) in proc.stderr and not missing.exists()


def test_the_reference_in_the_docs_is_the_model() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert BEGIN in doc and END in doc, "docs/configuration.md lost its generated settings reference"
    written = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    expected = reference_markdown().strip()
    assert written == expected, (
        "docs/configuration.md disagrees with the settings model; replace the block between the markers with "
        "the output of `python -c 'from xidpipe.commands.config import reference_markdown as r; print(r())'`")


def test_the_example_config_file_in_the_docs_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.config import use_config_file
    from xidpipe.commands.config import classes

    doc = (ROOT / "docs" / "configuration.md").read_text()
    [example] = re.findall(r"```yaml xidpipe\.yaml\n(.*?)```", doc, flags=re.S)
    path = tmp_path / "xidpipe.yaml"
    path.write_text(example)
    for name in list(os.environ):
        if name.startswith("XIDPIPE_") and not name.startswith("XIDPIPE_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XIDPIPE_WORKER_SASL_PASSWORD", "w")
    monkeypatch.setenv("XIDPIPE_RESPOND_SASL_PASSWORD", "r")
    use_config_file(path)
    try:
        loaded = {cls.service: cls() for cls in classes()}
    finally:
        use_config_file(None)
    assert loaded["worker"].cluster == loaded["respond"].cluster == "prod-east"
    assert loaded["actions"].kube_mode == "in-cluster" and loaded["worker"].policy.quiet_period_s == 3600
    assert (loaded["worker"].sasl_username, loaded["respond"].sasl_username) == ("worker", "responder")
