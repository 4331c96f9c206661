"""The demo's tickets as Jira gets their fields: summary, priority from the one severity table, components
and labels (golden files; UPDATE_GOLDEN=1 rewrites them after an intended change, then review the diff)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from models.dossier import Dossier, title
from models.ticket_policy import TicketPolicy, ticket_fields
from respond.sinks.model import IncidentNotice
from tests.models.test_dossier import DEMO

GOLDEN = Path(__file__).parent / "golden" / "demo"


def fields_of(d: Dossier) -> dict[str, object]:
    f = ticket_fields(IncidentNotice(dossier=d).subject(), TicketPolicy())
    return {"summary": title(d), "priority": f.priority, "assignee": f.assignee, "components": list(f.components),
            "labels": list(f.labels), "issue_type": f.issue_type, "project": f.project}


@pytest.mark.parametrize("path", DEMO, ids=[p.name.removesuffix(".dossier.json") for p in DEMO])
def test_the_demos_ticket_fields_golden(path: Path) -> None:
    got = json.dumps(fields_of(Dossier.model_validate_json(path.read_text())), indent=2, sort_keys=True) + "\n"
    golden = GOLDEN / f"{path.name.removesuffix('.dossier.json')}.jira-fields.json"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(got)
    assert got == golden.read_text()


def test_not_every_ticket_is_high_or_highest() -> None:
    """Priority follows severity: the lost GPU is Highest, the NVSwitch's non-fatal SXid that needs no cordon Low."""
    prio = {p.name.removesuffix(".dossier.json"): fields_of(Dossier.model_validate_json(p.read_text()))["priority"]
            for p in DEMO}
    assert prio["gpu-node-03-gpu_lost"] == "Highest" and prio["gpu-node-04-nvswitch"] == "Low"
    assert prio["gpu-node-02-memory"] == prio["gpu-node-05-gsp"] == "High"
