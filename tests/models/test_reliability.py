"""The fleet reliability figures: mean time to resolve and between incidents, per pool, node and card."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.reliability import IncidentSpan, figures, fleet_reliability

T = datetime(2026, 12, 1, tzinfo=UTC)


def span(node: str, card: str | None, start_h: float, took_h: float | None) -> IncidentSpan:
    start = T + timedelta(hours=start_h)
    return IncidentSpan(node, card, start, None if took_h is None else start + timedelta(hours=took_h))


@pytest.mark.parametrize(("spans", "expected"), [
    pytest.param([], (0, 0, None, None), id="nothing"),
    pytest.param([span("n1", "serial:A", 0, 2)], (1, 1, 7200.0, None), id="one incident has no time between"),
    pytest.param([span("n1", "serial:A", 0, None)], (1, 0, None, None), id="an open incident is not resolved"),
    pytest.param([span("n1", "serial:A", 0, 1), span("n1", "serial:A", 10, 3), span("n1", None, 4, None)],
                 (3, 2, 7200.0, 18000.0), id="mean over the resolved; between consecutive starts in any order"),
])
def test_figures(spans: list[IncidentSpan], expected: tuple[object, ...]) -> None:
    f = figures(spans)
    assert (f["incidents"], f["resolved"], f["mean_time_to_resolve_s"], f["mean_time_between_incidents_s"]) == expected


def test_a_resolution_before_the_first_fault_is_not_counted() -> None:
    bad = IncidentSpan("n1", None, T, T - timedelta(seconds=1))
    assert figures([bad])["resolved"] == 0


def test_fleet_figures_per_pool_node_and_card() -> None:
    spans = [span("n1", "serial:A", 0, 1), span("n1", "serial:A", 6, 3), span("n2", "serial:B", 2, 2),
             span("n3", None, 3, None), span("n4", "uuid:GPU-4", 8, 4)]
    got = fleet_reliability(spans, {"n1": "train", "n2": "train", "n3": "infer"}, top=2)
    assert got["all"] == figures(spans)
    # The pool as a whole: n1 and n2's incidents at 0, 2 and 6 h are 3 h apart on average.
    assert got["by_pool"]["train"] == {"incidents": 3, "resolved": 3, "mean_time_to_resolve_s": 7200.0,
                                       "mean_time_between_incidents_s": 10800.0}
    assert got["by_pool"][""]["incidents"] == 1  # n4's pool is not known
    assert list(got["by_pool"]) == ["train", "", "infer"]  # most incidents first, then by name
    assert list(got["by_node"]) == ["n1", "n2"]  # the top 2
    assert got["by_node"]["n1"]["mean_time_between_incidents_s"] == 6 * 3600.0
    assert list(got["by_card"]) == ["serial:A", "serial:B"]  # a node's incident has no card
    assert fleet_reliability(spans, {}, top=None)["by_card"].keys() == {"serial:A", "serial:B", "uuid:GPU-4"}


@pytest.mark.parametrize(("incident", "seconds"), [
    pytest.param({"component": "gpu", "category": "hardware", "first_seen": "2026-12-01T00:00:00+00:00",
                  "resolved_at": "2026-12-01T00:10:00+00:00"}, 600.0, id="a GPU's"),
    pytest.param({"component": "node", "category": "driver", "first_seen": "2026-12-01T00:00:00",
                  "resolved_at": "2026-12-01T01:00:00+00:00"}, 3600.0, id="a node's, a time without zone is UTC"),
    pytest.param({"component": "gpu", "category": "application", "first_seen": "2026-12-01T00:00:00+00:00",
                  "resolved_at": "2026-12-01T00:10:00+00:00"}, None, id="an application's counts nowhere"),
    pytest.param({"component": "fleet", "category": "hardware", "first_seen": "2026-12-01T00:00:00+00:00",
                  "resolved_at": "2026-12-01T00:10:00+00:00"}, None, id="the fleet's neither"),
    pytest.param({"component": "gpu", "category": "hardware", "first_seen": "2026-12-01T00:00:00+00:00",
                  "resolved_at": None}, None, id="open"),
    pytest.param({"component": "gpu", "category": "hardware", "first_seen": "yesterday",
                  "resolved_at": "2026-12-01T00:10:00+00:00"}, None, id="not a time"),
])
def test_time_to_resolve_of_an_incident_message(incident: dict[str, object], seconds: float | None) -> None:
    from models.reliability import started_at, time_to_resolve

    assert time_to_resolve(incident) == seconds
    assert (started_at(incident) is not None) == (incident["component"] in ("gpu", "node")
                                                   and incident["category"] != "application"
                                                   and incident["first_seen"] != "yesterday")
