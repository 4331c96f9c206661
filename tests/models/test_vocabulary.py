"""The vocabulary: every name the catalog and the runbook use is a member, the precedence is total and
the documented one, members are their strings on every wire, and fault codes round-trip."""

from __future__ import annotations

import csv
import itertools
import json
import re
from importlib import resources
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from models.catalog import load_catalog
from models.identity import primary_family
from models.runbook import CLASS_KEYS, load_runbook
from models.vocabulary import (
    CATALOG_CATEGORIES,
    FAMILY_PRECEDENCE,
    VERDICTS,
    ActionOutcome,
    Category,
    CodeKind,
    ComponentKind,
    Family,
    FaultCode,
    ImmediateAction,
    InvestigatoryAction,
    code_text,
    family_rank,
    report_code,
    stored_code,
    values,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def catalog_column(name: str) -> set[str]:
    """The distinct non-empty values of one column of the bundled xid.tsv, read as text (not through the loader)."""
    text = resources.files("models.catalog").joinpath("xid.tsv").read_text(encoding="utf-8")
    rows = csv.DictReader([line for line in text.splitlines() if line and not line.startswith("#")], delimiter="\t")
    return {row[name] for row in rows if row[name]}


@pytest.mark.parametrize(("column", "names"), [
    ("category", CATALOG_CATEGORIES),
    ("immediate_action", tuple(ImmediateAction)),
    ("investigatory_action", tuple(InvestigatoryAction)),
])
def test_the_vocabulary_names_exactly_what_the_catalog_uses(column: str, names: tuple[str, ...]) -> None:
    assert catalog_column(column) == set(names)


def test_the_loaded_catalog_carries_members() -> None:
    for info in load_catalog().xids.values():
        assert info.category in CATALOG_CATEGORIES and isinstance(info.category, Category), info.code
        assert info.immediate_action is None or isinstance(info.immediate_action, ImmediateAction), info.code
        assert info.investigatory_action is None or isinstance(info.investigatory_action, InvestigatoryAction)


def test_the_runbook_has_one_entry_per_immediate_action_and_orders_only_its_entries() -> None:
    runbook = load_runbook()
    assert set(runbook.actions) == set(ImmediateAction)
    assert set(runbook.order) <= set(ImmediateAction) | set(CLASS_KEYS)


def test_the_family_precedence_is_total() -> None:
    assert sorted(FAMILY_PRECEDENCE) == sorted(Family)
    assert [family_rank(f) for f in FAMILY_PRECEDENCE] == list(range(len(Family)))
    assert family_rank("no such family") == len(Family)
    for a, b in itertools.permutations(Family, 2):  # either order of reports labels the incident alike
        assert primary_family(a, b) == primary_family(b, a) == (a if family_rank(a) < family_rank(b) else b)


@pytest.mark.parametrize(("worse", "milder", "why"), [
    (Family.GPU_LOST, Family.PCIE, "an AER report followed by Xid 79 is a lost GPU"),
    (Family.MEMORY, Family.APPLICATION, "ECC errors on a GPU that also crashed jobs are a memory fault"),
    (Family.GSP, Family.RECOVERY_ACTION, "Xid 119 and the Xid 154 that follows it are a GSP fault"),
    (Family.OTHER, Family.APPLICATION, "an application fault ranks last"),
])
def test_the_precedence_decides_as_documented(worse: Family, milder: Family, why: str) -> None:
    assert primary_family(milder, worse) == worse, why


def test_the_glossary_lists_the_families_in_their_precedence() -> None:
    glossary = (DOCS / "architecture.md").read_text().splitlines()
    row = next(line for line in glossary if line.startswith("| fault family"))
    listed = re.findall(r"`([a-z_]+)`", row.split("most severe first:", 1)[1].split(";", 1)[0])
    assert listed == list(FAMILY_PRECEDENCE)


def test_the_category_subsets() -> None:
    assert set(CATALOG_CATEGORIES) | {Category.SUSPECTED_HARDWARE} == set(VERDICTS)
    assert set(VERDICTS) | {Category.FLEET} == set(Category)


class _Row(BaseModel):
    family: Family
    categories: tuple[Category, ...]


def test_members_are_their_strings_on_every_wire() -> None:
    row = _Row(family="gpu_lost", categories=("hardware", "fleet"))  # type: ignore[arg-type]
    assert row.model_dump_json() == '{"family":"gpu_lost","categories":["hardware","fleet"]}'
    assert json.dumps({Family.MEMORY: [ComponentKind.GPU]}) == '{"memory": ["gpu"]}'
    assert f"{Family.GPU_LOST}/{Category.HARDWARE}" == "gpu_lost/hardware"
    assert {"gpu_lost": 1}[Family.GPU_LOST] == 1 and Category.FLEET in frozenset({"fleet"})
    assert values(ComponentKind) == ("gpu", "nvswitch", "node", "workload", "fleet")
    assert all(type(v) is str for v in values(Category))  # argparse shows choices with repr()


@pytest.mark.parametrize(("code", "text"), [
    (FaultCode(CodeKind.XID, 79), "Xid 79"),
    (FaultCode(CodeKind.XID, 1), "Xid 1"),
    (FaultCode(CodeKind.SXID, 12028), "SXid 12028"),
])
def test_a_code_round_trips_through_its_stored_text(code: FaultCode, text: str) -> None:
    assert code_text(code) == str(code) == text
    assert stored_code(text) == code


@pytest.mark.parametrize("text", [
    "fallen off the bus", "AER", "ECC", "GPU missing", "gsp_rpc_timeout", "", "Xid", "Xid ", "xid 79", "XID 79",
    "Xid 079", "Xid +79", "Xid -1", "Xid 79 ", " Xid 79", "Xid  79", "Xid 7 9", "Xid \u0667\u0669", "Xid ７９",
    "Xid 79\n", "SXid", "Sxid 12028",
])
def test_text_that_is_no_stored_code_names_none(text: str) -> None:
    assert stored_code(text) is None


@pytest.mark.parametrize(("kind", "xid", "sxid", "shown"), [
    ("xid", 79, None, "Xid 79"),
    ("sxid", None, 12028, "SXid 12028"),
    ("xid", None, None, "xid"),  # no number: the kind, never "Xid None"
    ("gpu_fallen_off_bus", 79, None, "fallen off the bus"),  # an Xid number on another kind is not its code
    ("pcie_aer", None, None, "AER"),
    ("ecc", None, None, "ECC"),
    ("gpu_missing", None, None, "GPU missing"),
    ("driver_error", None, None, "driver_error"),
])
def test_how_a_report_code_is_shown(kind: str, xid: int | None, sxid: int | None, shown: str) -> None:
    assert report_code(kind, xid, sxid) == shown
    assert (stored_code(shown) is not None) == (shown.startswith(("Xid ", "SXid ")))


def test_the_action_log_records_only_the_vocabulary_outcomes() -> None:
    """The action log's record type names its outcomes as a Literal; they must be the vocabulary's."""
    from respond.cordon.action_log import ActionOutcome as Recorded

    assert set(get_args(Recorded)) == set(values(ActionOutcome))
