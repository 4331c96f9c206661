"""The chart's PrometheusRules, checked and evaluated by Prometheus's own promtool (built by
``make testcluster``): ``promtool check rules`` on the rule groups the chart renders, and one
``promtool test rules`` unit test per alert, ``tests/deploy/alert_rules/<alert>.yml``.

Each unit test shows its alert firing, not firing, and its ``for`` duration: pending a minute before
it has passed, firing once it has. The tests below prove each file pins that duration (the same
file fails against the rule with ``for`` a minute longer or shorter) and that no alert the chart
renders goes without its file.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.alerting import chart_rule_groups

UNIT_TESTS = Path(__file__).parent / "alert_rules"
# Every alert is rendered: all components on, and the ServiceMonitors whose `up` the down alerts read.
EVERYTHING = ("serviceMonitor.enabled=true",)


def promtool_run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def write_rules(path: Path, groups: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(groups, sort_keys=False))
    return path


def rendered_alerts(*sets: str) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in chart_rule_groups(*sets)["groups"] for r in g["rules"]}


def seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match, f"unexpected duration {duration!r}"
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


def with_for(groups: dict[str, Any], alert: str, for_s: int) -> dict[str, Any]:
    """The rule groups with `alert`'s `for` set to `for_s` seconds (none when 0)."""
    changed = copy.deepcopy(groups)
    rule = next(r for g in changed["groups"] for r in g["rules"] if r.get("alert") == alert)
    rule.pop("for", None)
    if for_s:
        rule["for"] = f"{for_s}s"
    return changed


def unit_test(promtool: str, tmp_path: Path, alert: str, groups: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    write_rules(tmp_path / "rules.yml", groups)
    shutil.copy(UNIT_TESTS / f"{alert}.yml", tmp_path / f"{alert}.yml")
    return promtool_run(promtool, "test", "rules", f"{alert}.yml", cwd=tmp_path)


def test_promtool_accepts_every_rule_the_chart_renders(promtool: str, tmp_path: Path) -> None:
    groups = chart_rule_groups(*EVERYTHING)
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


def test_every_alert_the_chart_renders_has_its_unit_test() -> None:
    files = {p.stem for p in UNIT_TESTS.glob("*.yml")}
    assert files == set(rendered_alerts(*EVERYTHING)), "an alert without its tests/deploy/alert_rules/<alert>.yml"
    for path in sorted(UNIT_TESTS.glob("*.yml")):
        spec = yaml.safe_load(path.read_text())
        evals = [e for t in spec["tests"] for e in t["alert_rule_test"]]
        assert {e["alertname"] for e in evals} == {path.stem}, path.name
        assert any(e["exp_alerts"] for e in evals), f"{path.name}: the alert never fires"
        assert any(not e["exp_alerts"] for e in evals), f"{path.name}: no case where it does not fire"


def test_without_servicemonitors_no_alert_reads_a_target_the_chart_did_not_make() -> None:
    # `up{service="xidpipe-worker-metrics"}` exists only with the chart's ServiceMonitors: without
    # them the down and absent alerts would fire forever.
    everything, bare = rendered_alerts(*EVERYTHING), rendered_alerts()
    reading_up = {name for name, rule in everything.items() if re.search(r"\bup\{", rule["expr"])}
    assert reading_up == {"XidpipeAgentDown", "XidpipeAgentsAbsent", "XidpipeWorkerDown", "XidpipeResponderDown"}
    assert set(bare) == set(everything) - reading_up


@pytest.mark.parametrize("alert", sorted(p.stem for p in UNIT_TESTS.glob("*.yml")))
def test_promtool_unit_test_of_each_alert(promtool: str, tmp_path: Path, alert: str) -> None:
    groups = chart_rule_groups(*EVERYTHING)
    rule = rendered_alerts(*EVERYTHING)[alert]
    passed = unit_test(promtool, tmp_path, alert, groups)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "SUCCESS" in passed.stdout

    # The file pins the `for` duration: a minute longer and the firing case is still pending; a
    # minute shorter (for an alert that waits) and the "just before" case already fires.
    for_s = seconds(rule["for"]) if "for" in rule else 0
    for changed in (for_s + 60, for_s - 60) if for_s else (60,):
        failed = unit_test(promtool, tmp_path, alert, with_for(groups, alert, changed))
        assert failed.returncode != 0, f"{alert}: passes with `for: {changed}s` as well"
        assert alert in failed.stdout + failed.stderr
