"""The test Alertmanager (tests/alerting.py) takes alerts by its API v2, lists them active, groups
them by its route and resolves one sent with an end time in the past."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from tests.alerting import MINIMAL_CONFIG

pytestmark = pytest.mark.alertmanager


def alert(node: str, *, ends: datetime | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "labels": {"alertname": "XidpipeGpuFault", "node": node, "gpu": "GPU-1", "severity": "critical"},
        "annotations": {"summary": f"Xid 79 on {node}: the GPU fell off the bus"},
        "startsAt": (datetime.now(UTC) - timedelta(minutes=1)).isoformat(),
        "generatorURL": "http://xidpipe.example/incidents/1",
    }
    if ends is not None:
        body["endsAt"] = ends.isoformat()
    return body


def listed(api: str, **params: str) -> list[dict[str, Any]]:
    response = requests.get(f"{api}/alerts", params=params, timeout=10)
    response.raise_for_status()
    return list(response.json())


def test_alertmanager_takes_an_alert_by_its_api_and_lists_it(alertmanager) -> None:
    am = alertmanager(MINIMAL_CONFIG)
    response = requests.post(f"{am.api}/alerts", json=[alert("gpu-node-1"), alert("gpu-node-2")], timeout=10)
    assert response.status_code == 200, response.text

    alerts = {a["labels"]["node"]: a for a in listed(am.api)}
    assert set(alerts) == {"gpu-node-1", "gpu-node-2"}
    first = alerts["gpu-node-1"]
    assert first["status"]["state"] == "active"
    assert [r["name"] for r in first["receivers"]] == ["nowhere"]
    assert first["annotations"]["summary"] == "Xid 79 on gpu-node-1: the GPU fell off the bus"
    groups = requests.get(f"{am.api}/alerts/groups", timeout=10).json()
    assert [(g["labels"], len(g["alerts"])) for g in groups] == [({"alertname": "XidpipeGpuFault"}, 2)]


def test_an_alert_sent_with_an_end_in_the_past_is_resolved(alertmanager) -> None:
    am = alertmanager(MINIMAL_CONFIG)
    requests.post(f"{am.api}/alerts", json=[alert("gpu-node-1")], timeout=10).raise_for_status()
    assert len(listed(am.api, active="true")) == 1
    resolved = alert("gpu-node-1", ends=datetime.now(UTC) - timedelta(seconds=1))
    requests.post(f"{am.api}/alerts", json=[resolved], timeout=10).raise_for_status()
    assert listed(am.api, active="true") == []


def test_an_alert_without_labels_is_refused_as_unprocessable(alertmanager) -> None:
    am = alertmanager(MINIMAL_CONFIG)
    response = requests.post(f"{am.api}/alerts", json=[{"annotations": {"summary": "no labels"}}], timeout=10)
    assert response.status_code == 422, response.text  # the API's schema requires labels
    assert listed(am.api) == []
