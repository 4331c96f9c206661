"""The names people give an incident, and the short ids the tables show."""

from __future__ import annotations

import pytest

from models.incident_ref import SHORT_ID_MIN, id_prefixes, probe_keys, short_id, strip_version
from models.ticket_policy import fingerprint_label, incident_label, label_safe

ID = "v2:9af48e81bb6cb563@20261125T125203.000000Z"


@pytest.mark.parametrize(("typed", "prefixes"), [
    (ID, (ID,)),
    (label_safe(ID), (ID,)),  # the ticket's key: v2-9af48e81bb6cb563-20261125t125203.000000z
    (incident_label(ID), (ID,)),
    (label_safe(ID)[:24], ("v2:9af48e81bb6cb563@2026",)),
    ("v2:9af48e81bb6cb563", ("v2:9af48e81bb6cb563",)),
    (fingerprint_label("v2:9af48e81bb6cb563"), ("v2:9af48e81bb6cb563",)),
    ("9af48e8", ("v2:9af48e8", "v1:9af48e8")),  # no version: any, the current first
    ("9AF48E8", ("v2:9af48e8", "v1:9af48e8")),
    ("9af48e81bb6cb563@20261125T1252", ("v2:9af48e81bb6cb563@20261125T1252", "v1:9af48e81bb6cb563@20261125T1252")),
    ("v2:", ("v2:",)),
    ("  v2:9af4 ", ("v2:9af4",)),
])
def test_every_form_comes_to_the_canonical_prefix(typed: str, prefixes: tuple[str, ...]) -> None:
    assert id_prefixes(typed) == prefixes


@pytest.mark.parametrize("typed", ["", "v2:%", "zzzz", "v2:9af4@x", "9af4-20261125", "gpu-node-02", "v2:9af4_"])
def test_what_cannot_be_part_of_an_id_names_nothing(typed: str) -> None:
    assert id_prefixes(typed) == ()


def test_a_short_id_is_the_shortest_unique_prefix_without_the_version() -> None:
    assert short_id(ID, []) == "9af48e8" and len(short_id(ID, [])) == SHORT_ID_MIN
    assert short_id(ID, ["v2:9af48e8000000000@20261125T000000.000000Z"]) == "9af48e81"
    # A recurrence shares the fingerprint: its short id goes on into the opening time.
    again = "v2:9af48e81bb6cb563@20261126T080000.000000Z"
    assert short_id(ID, [again]) == "9af48e81bb6cb563@20261125"
    assert short_id(again, [ID]) == "9af48e81bb6cb563@20261126"
    # Another version of the same hex counts too; the id itself does not.
    assert short_id(ID, ["v1:9af48e81bb000000@20200101T000000.000000Z", ID]) == "9af48e81bb6"
    assert strip_version(ID) == "9af48e81bb6cb563@20261125T125203.000000Z" and strip_version("x:y") == "x:y"
    assert probe_keys(ID, (1, 2)) == ("v1:" + strip_version(ID), ID)
