"""The one severity table: family × decision → severity, the same in the code and in the docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.account import Decision
from models.severity import Severity, severity, table
from models.vocabulary import Family

DOC = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"


def documented() -> dict[str, dict[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- severity-table")[1].split("<!-- /severity-table -->")[0]
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in block.splitlines() if ln.startswith("|")]
    header, body = rows[0], rows[2:]
    return {r[0]: dict(zip(header[1:], r[1:], strict=True)) for r in body}


def test_the_documented_table_is_the_codes() -> None:
    assert documented() == {f.value: {d.value: s.value for d, s in row.items()} for f, row in table().items()}
    assert set(documented()) == {f.value for f in Family}


@pytest.mark.parametrize(("family", "decision", "component", "want"), [
    ("gpu_lost", "dry_run", "gpu", Severity.CRITICAL),  # the GPU is gone, whatever was decided
    ("memory", "cordoned", "gpu", Severity.ERROR),
    ("memory", "held", "gpu", Severity.CRITICAL),  # the policy wanted the node out; the breaker kept it in
    ("memory", "failed", "gpu", Severity.CRITICAL),
    ("nvswitch", "not_needed", "nvswitch", Severity.INFO),  # the policy judged the node fine to keep working
    ("application", "not_offered", "workload", Severity.INFO),
    ("driver", "not_offered", "fleet", Severity.ERROR),  # many nodes at once: one step above the family
    ("gpu_lost", "held", "gpu", Severity.CRITICAL),  # never past the top
    ("no-such-family", "pending", "gpu", Severity.WARNING),
])
def test_the_severity_follows_family_and_decision(family: str, decision: str, component: str,
                                                  want: Severity) -> None:
    assert severity(family, decision, component) is want


def test_no_decision_makes_an_incident_less_urgent_than_not_needing_a_cordon() -> None:
    order = list(Severity)
    for family in Family:
        floor = order.index(severity(family, Decision.NOT_NEEDED))
        assert all(order.index(severity(family, d)) <= floor for d in Decision), family
