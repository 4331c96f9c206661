"""The chart's PrometheusRules, checked and evaluated by Prometheus's own promtool (built by
``make testcluster``): ``promtool check rules`` on the rule groups the chart renders, and a
``promtool test rules`` unit test of one alert, XidpipeAgentDown (``for: 5m``)."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.alerting import chart_rule_groups


def promtool_run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def write_rules(path: Path, groups: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(groups, sort_keys=False))
    return path


def test_promtool_accepts_every_rule_the_chart_renders(promtool: str, tmp_path: Path) -> None:
    groups = chart_rule_groups()
    rules = [rule for group in groups["groups"] for rule in group["rules"]]
    assert {g["name"] for g in groups["groups"]} == {"xidpipe-agent", "xidpipe-pipeline"}
    checked = promtool_run(promtool, "check", "rules", str(write_rules(tmp_path / "rules.yml", groups)), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout

    # The check is real: one expression PromQL cannot parse makes it fail, naming the alert.
    broken = copy.deepcopy(groups)
    broken["groups"][0]["rules"][0]["expr"] = "sum(up{namespace=\"xidpipe\"} == 0"
    failed = promtool_run(promtool, "check", "rules", str(write_rules(tmp_path / "broken.yml", broken)),
                          cwd=tmp_path)
    assert failed.returncode != 0
    assert broken["groups"][0]["rules"][0]["alert"] in failed.stdout + failed.stderr


AGENT_DOWN_TEST = {
    "rule_files": ["rules.yml"],
    "evaluation_interval": "1m",
    "tests": [{
        "interval": "1m",
        # The agent is scraped (1) for two minutes, then not (0) for ten.
        "input_series": [{
            "series": 'up{namespace="xidpipe-agent", service="xidpipe-agent-metrics", pod="xidpipe-agent-7xk2p"}',
            "values": "1 1 0x10",
        }],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "XidpipeAgentDown", "exp_alerts": []},
            # Down since 2m: pending, not firing, until its 5 minutes have passed.
            {"eval_time": "6m", "alertname": "XidpipeAgentDown", "exp_alerts": []},
            {"eval_time": "7m", "alertname": "XidpipeAgentDown", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "xidpipe-agent",
                               "service": "xidpipe-agent-metrics", "pod": "xidpipe-agent-7xk2p"},
                "exp_annotations": {"summary": "xidpipe agent on xidpipe-agent-7xk2p is not scraped: "
                                               "GPU faults on its node go unseen"},
            }]},
        ],
    }],
}


def test_promtool_unit_test_of_the_agent_down_alert(promtool: str, tmp_path: Path) -> None:
    write_rules(tmp_path / "rules.yml", chart_rule_groups())
    (tmp_path / "agent_down_test.yml").write_text(yaml.safe_dump(AGENT_DOWN_TEST, sort_keys=False))
    passed = promtool_run(promtool, "test", "rules", "agent_down_test.yml", cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "SUCCESS" in passed.stdout

    # The evaluation is real: expecting the alert to fire a minute before its `for` has passed fails.
    early = copy.deepcopy(AGENT_DOWN_TEST)
    early["tests"][0]["alert_rule_test"][1]["exp_alerts"] = AGENT_DOWN_TEST["tests"][0]["alert_rule_test"][2][
        "exp_alerts"]
    (tmp_path / "early_test.yml").write_text(yaml.safe_dump(early, sort_keys=False))
    failed = promtool_run(promtool, "test", "rules", "early_test.yml", cwd=tmp_path)
    assert failed.returncode != 0
    assert "XidpipeAgentDown" in failed.stdout + failed.stderr


REMEDIATION_STUCK_TEST = {
    "rule_files": ["rules.yml"],
    "evaluation_interval": "1m",
    "tests": [{
        "interval": "1m",
        # No loop overdue for two minutes, then one loop past its deadline (the responder's gauge).
        "input_series": [{
            "series": 'xidpipe_responder_remediation_overdue{namespace="xidpipe", pod="xidpipe-respond-0"}',
            "values": "0 0 1x20",
        }],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "XidpipeRemediationStuck", "exp_alerts": []},
            # Overdue since 2m: pending for its 10 minutes.
            {"eval_time": "11m", "alertname": "XidpipeRemediationStuck", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "XidpipeRemediationStuck", "exp_alerts": [{
                "exp_labels": {"severity": "warning"},
                "exp_annotations": {"summary": "1 remediation loop(s) past their deadline: see "
                                               "`xidpipe remediation list --stuck`"},
            }]},
        ],
    }],
}


def test_promtool_unit_test_of_the_stuck_remediation_alert(promtool: str, tmp_path: Path) -> None:
    write_rules(tmp_path / "rules.yml", chart_rule_groups())
    (tmp_path / "stuck_test.yml").write_text(yaml.safe_dump(REMEDIATION_STUCK_TEST, sort_keys=False))
    passed = promtool_run(promtool, "test", "rules", "stuck_test.yml", cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr

    # A loop that is not overdue raises nothing.
    calm = copy.deepcopy(REMEDIATION_STUCK_TEST)
    calm["tests"][0]["input_series"][0]["values"] = "0x22"
    (tmp_path / "calm_test.yml").write_text(yaml.safe_dump(calm, sort_keys=False))
    failed = promtool_run(promtool, "test", "rules", "calm_test.yml", cwd=tmp_path)
    assert failed.returncode != 0 and "XidpipeRemediationStuck" in failed.stdout + failed.stderr
