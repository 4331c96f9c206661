"""A real Alertmanager and Prometheus's promtool for the tests, both built by ``make testcluster``.

Fixtures
--------
``alertmanager`` (function)
    ``start(config: str) -> Alertmanager``: an Alertmanager started with that alertmanager.yml
    text (``deploy/testcluster/alertmanager.py``), one instance per call, stopped after the test.
    ``.url`` is ``http://127.0.0.1:PORT``, ``.api`` its ``/api/v2``, ``.log`` its log file.
``promtool`` (session, ``str``)
    The promtool binary's path.

Helpers: ``chart_rule_groups(*sets)`` (the rule groups of the chart's PrometheusRules, as a
Prometheus rule file takes them) and ``MINIMAL_CONFIG`` (one route to a receiver that sends nothing).

A test that uses ``alertmanager`` gets the ``alertmanager`` marker (``tests.services``). Under
``CI=true`` a missing binary or an Alertmanager that does not start fails the test; elsewhere it is
skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.kube import CHART, helm_binary
from tests.services import service_unavailable

REPO = Path(__file__).resolve().parents[1]
ALERTMANAGER_PY = REPO / "deploy" / "testcluster" / "alertmanager.py"
# One route to a receiver without integrations: alerts are received, grouped and listed, not sent.
MINIMAL_CONFIG = """\
route:
  receiver: nowhere
  group_by: [alertname]
receivers:
  - name: nowhere
"""


def load_alertmanager() -> ModuleType:
    """deploy/testcluster/alertmanager.py as a module (deploy/ is not a Python package)."""
    name = "xidpipe_testcluster_alertmanager"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ALERTMANAGER_PY)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


am_module = load_alertmanager()


@pytest.fixture
def alertmanager() -> Iterator[Callable[[str], Any]]:
    started: list[Any] = []

    def start(config: str) -> Any:
        try:
            am = am_module.start(config)
        except am_module.cp.ControlPlaneError as exc:
            service_unavailable("Alertmanager", str(exc))
        started.append(am)
        return am

    yield start
    for am in started:
        am.stop()
        assert not am.alive(), f"Alertmanager at {am.url} still running"


@pytest.fixture(scope="session")
def promtool() -> str:
    try:
        [path] = am_module.cp.built_binaries("promtool")
    except am_module.cp.ControlPlaneError as exc:
        service_unavailable("promtool", str(exc))
    return str(path)


def chart_rule_groups(*sets: str) -> dict[str, Any]:
    """``{"groups": [...]}``: every group of the PrometheusRules the chart renders with
    ``prometheusRule.enabled=true`` (and ``sets``), as release ``xidpipe`` in namespace ``xidpipe``,
    i.e. the contents of a Prometheus rule file."""
    cmd = [helm_binary(), "template", "xidpipe", str(CHART), "--namespace", "xidpipe",
           "--set", "prometheusRule.enabled=true"]
    for value in sets:
        cmd += ["--set", value]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"helm template failed: {proc.stderr}"
    rules = [d for d in yaml.safe_load_all(proc.stdout) if d and d.get("kind") == "PrometheusRule"]
    return {"groups": [group for rule in rules for group in rule["spec"]["groups"]]}
