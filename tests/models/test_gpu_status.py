"""A card's status from its open incidents and its node's cordon."""

from __future__ import annotations

import pytest

from models.gpu_status import CardIncident, card_status, node_cordon

BUS = CardIncident("55b4bb1", "gpu_lost", "ticketed")


@pytest.mark.parametrize(("actions", "state"), [
    ([], None),
    ([("cordon", "done")], "cordoned"),
    ([("cordon", "noop")], "cordoned"),  # it was cordoned already
    ([("cordon", "dry_run")], "cordon-dry-run"),
    ([("cordon", "done"), ("cordon", "dry_run")], "cordoned"),  # a later dry run does not uncordon it
    ([("cordon", "done"), ("release", "done")], None),
    ([("cordon", "done"), ("release", "refused")], "cordoned"),
    ([("cordon", "skipped"), ("cordon", "failed"), ("cordon", "blocked")], None),
])
def test_the_nodes_cordon_from_its_records(actions: list[tuple[str, str]], state: str | None) -> None:
    assert node_cordon(actions) == state


@pytest.mark.parametrize(("ledger", "incidents", "cordon", "status"), [
    ("in_service", [], None, "ok"),
    ("in_service", [BUS], None, "faulted"),
    ("in_service", [BUS], "cordoned", "faulted,cordoned"),
    ("in_service", [BUS], "cordon-dry-run", "faulted,cordon-dry-run"),
    ("in_service", [], "cordoned", "cordoned"),
    ("missing", [BUS], "cordoned", "missing,faulted,cordoned"),
    ("retired", [], None, "retired"),
    ("in_service", [CardIncident("55b4bb1", "gpu_lost", "rma")], None, "rma"),
    ("in_service", [CardIncident("55b4bb1", "gpu_lost", "closed")], None, "ok"),
    ("in_service", [CardIncident("55b4bb1", "gpu_lost", "repaired")], None, "ok"),
])
def test_status(ledger: str, incidents: list[CardIncident], cordon: str | None, status: str) -> None:
    assert card_status(ledger, incidents, cordon, "gpu-node-03").status == status


def test_the_reason_names_the_incidents_and_the_node() -> None:
    why = card_status("in_service", [BUS], "cordon-dry-run", "gpu-node-03").reason
    assert why == ("open: gpu_lost 55b4bb1 (ticketed); the cordon of gpu-node-03 was a dry run: the node is not "
                   "cordoned")
    assert card_status("in_service", [], None, "n", quarantined=True).status == "quarantined"
    assert card_status("in_service", [CardIncident("x", "memory", "closed")], None, "n").reason == \
        "no open incident (1 ended)"
