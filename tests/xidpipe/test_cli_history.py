"""The history commands as an on-call engineer uses them on the sample cluster's history: tables at 80
and 120 columns and piped, every name of an incident, the SXid filter, merged incidents, stats over
the span the history covers, and each card's status."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.cells import cell_len

from models.ticket_policy import fingerprint_label, incident_label, label_safe
from tests.terminal import in_terminal
from tests.xidpipe.sample_history import BUS, MEMORY, NLP_SHELL, NVSWITCH, History, build


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return build(tmp_path_factory.mktemp("sample"))


def run(history: History, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args, "--database-url", history.url],
                          capture_output=True, text=True, timeout=120, check=False)


def data(history: History, *args: str) -> Any:
    proc = run(history, *args, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def listed(history: History, *filters: str) -> list[dict[str, Any]]:
    return list(data(history, "incidents", "list", *filters)["incidents"])


@pytest.mark.parametrize("columns", [80, 120])
def test_the_list_fits_the_terminal_without_wrapping_an_id_or_a_name(history: History, columns: int) -> None:
    incidents = listed(history, "--all")
    screen = in_terminal("incidents", "list", "--all", "--database-url", history.url, columns=columns)
    assert screen.code == 0, screen.stderr
    lines = [ln for ln in screen.lines if ln]
    assert all(cell_len(ln) <= columns for ln in lines), [ln for ln in lines if cell_len(ln) > columns]
    rows = {ln.split()[0]: ln for ln in lines[1:-1]}
    # One line per incident, each starting with its short id, whole; its node whole.
    assert len(lines) == 1 + len(incidents) + 1 and set(rows) == {i["short_id"] for i in incidents}
    for i in incidents:
        assert f" {i['node']} " in rows[i["short_id"]]
    memory = next(i for i in incidents if i["incident_id"] == MEMORY)
    # Free text is cut with an ellipsis: the memory incident's four codes do not fit either width.
    codes = ", ".join(memory["codes"])
    assert codes not in rows[memory["short_id"]] and "…" in rows[memory["short_id"]]
    assert rows[memory["short_id"]].split("  ")[0] == memory["short_id"]
    shells = [i["short_id"] for i in incidents if i["merged_into"]]
    assert len(shells) == 3 and all(" merged " in rows[s] for s in shells)
    header = lines[0].split()
    assert header[:2] == ["ID", "NODE"] and header[-1] == "AGE"
    assert ("FAMILY" in header) == (columns >= 120)  # left out where it does not fit


def test_piped_the_list_is_plain_columns_with_nothing_cut(history: History) -> None:
    proc = run(history, "incidents", "list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "…" not in proc.stdout and "\x1b[" not in proc.stdout
    assert "Xid 13, Xid 94, Xid 48, Xid 63" in proc.stdout
    assert "AER, Xid 79, fallen off the bus, driver_error" in proc.stdout
    assert lines[-1] == "6 of 6 (offset 0); 3 merged into others not shown (--all shows them)"
    wide = run(history, "incidents", "list", "-o", "wide").stdout
    assert all(i in wide for i in (MEMORY, BUS, NVSWITCH)) and "team-nlp, team-serving, team-vision" in wide


def test_ages_and_times_carry_their_zone(history: History) -> None:
    rows = run(history, "incidents", "list").stdout.splitlines()
    header = rows[0].split()
    ages = [r.split()[-1] for r in rows[1:-2]]
    assert header[-1] == "AGE" and all(a[-1] in "smhdy" and a[0].isdigit() for a in ages), ages
    shown = data(history, "incidents", "show", MEMORY)
    (action,) = shown["dossier"]["actions"]
    assert datetime.fromisoformat(action["at"]) == history.actions_at  # the action record's time, with its zone
    markdown = run(history, "incidents", "show", MEMORY).stdout
    assert f"| {history.actions_at.isoformat()} | cordon | cordon | dry run |" in markdown


def test_show_and_transition_take_every_name_of_an_incident(history: History) -> None:
    (memory,) = [i for i in listed(history) if i["incident_id"] == MEMORY]
    fingerprint = memory["fingerprint"]
    names = [
        MEMORY,  # the id
        label_safe(MEMORY),  # the form tickets carry: v2-9af48e81bb6cb563-20261125t120203.000000z
        incident_label(MEMORY),  # the Jira label: xidpipe-inc-v2-...
        fingerprint, fingerprint_label(fingerprint),  # the bare fingerprint and its label
        fingerprint.split(":", 1)[1],  # the hex alone
        memory["short_id"], memory["short_id"][:4], MEMORY[:12], label_safe(MEMORY)[:10],  # prefixes
    ]
    for name in names:
        assert data(history, "incidents", "show", name)["dossier"]["incident_id"] == MEMORY, name
    assert label_safe(MEMORY) == "v2-9af48e81bb6cb563-20261125t120203.000000z"
    step = data(history, "incidents", "transition", label_safe(NVSWITCH), "closed", "--reason", "reseated")
    assert (step["incident_id"], step["to"]) == (NVSWITCH, "closed")


def test_an_ambiguous_or_unknown_name_is_a_usage_error_naming_the_candidates(history: History) -> None:
    proc = run(history, "incidents", "show", "v2:")
    assert proc.returncode == 2 and "'v2:' is ambiguous: 9 incidents match it" in proc.stderr
    assert MEMORY in proc.stderr and f"{NLP_SHELL} (gpu-node-02 application application, merged into {MEMORY})" \
        in proc.stderr
    for name in ("9af", "v2-zzzz", "nothing"):
        proc = run(history, "incidents", "show", name)
        assert proc.returncode == 2 and f"no incident {name!r}" in proc.stderr
    assert "at least 4 characters" in run(history, "incidents", "show", "9af").stderr
    assert run(history, "incidents", "transition", "nothing", "closed", "--reason", "x").returncode == 2


@pytest.mark.parametrize(("code", "expected"), [
    ("12028", {NVSWITCH}), ("SXid 12028", {NVSWITCH}), ("sxid:12028", {NVSWITCH}), ("Xid 12028", set()),
    ("48", {MEMORY}), ("Xid 48", {MEMORY}), ("xid:48", {MEMORY}), ("SXid 48", set()),
    ("13", {MEMORY, "v2:28cf5c86dfe51100@20261125T121640.200000Z"}),  # the shells' Xid 13 is the memory incident's
])
def test_the_code_filter_takes_xids_and_sxids(history: History, code: str, expected: set[str]) -> None:
    assert {i["incident_id"] for i in listed(history, "--xid", code)} == expected


def test_a_code_that_is_no_code_is_refused_with_the_forms(history: History) -> None:
    proc = run(history, "incidents", "list", "--xid", "Xid forty")
    assert proc.returncode == 2 and "not a fault code: 'Xid forty'" in proc.stderr and "sxid:12028" in proc.stderr


def test_merged_incidents_are_hidden_unless_asked_for(history: History) -> None:
    shown = listed(history)
    assert len(shown) == 6 and not any(i["merged_into"] for i in shown)
    everything = listed(history, "--all")
    assert len(everything) == 9 and {i["merged_into"] for i in everything} == {None, MEMORY}
    assert {i["incident_id"] for i in listed(history, "--merged")} == {i["incident_id"] for i in everything
                                                                       if i["merged_into"]}
    # team-nlp's job was killed by the failing GPU: the namespace finds that incident, not an empty shell.
    assert [i["incident_id"] for i in listed(history, "--namespace", "team-nlp")] == [MEMORY]
    assert {i["incident_id"] for i in listed(history, "--namespace", "team-nlp", "--all")} == {MEMORY, NLP_SHELL}
    shell = run(history, "incidents", "show", NLP_SHELL).stdout
    assert shell.startswith(f"Merged into 9af48e8 ({MEMORY})")


def test_stats_rate_stays_within_the_span_of_its_data(history: History) -> None:
    rates = data(history, "stats")["gpu_rates"]
    # The sample's first record is the nodes' inventory at 09:47:40; its last, the GSP fault at 00:00:02.
    assert rates["span"] == {"from": "2026-11-25T09:47:40+00:00", "to": "2026-11-26T00:00:02+00:00", "days": 0.592}
    assert (rates["gpus"], rates["incidents"], rates["incidents_per_gpu"]) == (7, 4, round(4 / 7, 3))
    assert rates["incidents_per_gpu_per_30d"] is None and "less than 30 days" in rates["note"]
    text = run(history, "stats").stdout
    assert "GPU fault rates over 14.2 hours, 2026-11-25T09:47:40Z to 2026-11-26T00:00:02Z" in text
    assert "per 30 days" in text and "17.143" not in text
    since = data(history, "stats", "--since", "2026-11-25T18:00:00Z")["gpu_rates"]["span"]
    assert since["from"] == "2026-11-25T18:00:00+00:00" and since["days"] == round((6 * 3600 + 2) / 86400, 3)
    hardware_gpus = data(history, "stats")["incidents"]["hardware_by_gpu"]
    assert "gpu-node-04/0000:86:00.0" not in hardware_gpus  # the NVSwitch is no GPU


def test_gpus_list_says_which_cards_can_be_trusted_and_why(history: History) -> None:
    cards = {g["node"] + " " + g["pci_slot"]: g for g in data(history, "gpus", "list")["gpus"]}
    bus = cards["gpu-node-03 0000:63:00.0"]
    assert bus["state"] == "in_service" and bus["status"] == "faulted,cordoned"
    assert "gpu_lost 55b4bb1" in bus["status_reason"] and "gpu-node-03 is cordoned" in bus["status_reason"]
    memory = cards["gpu-node-02 0000:b7:00.0"]
    assert memory["status"] == "faulted,cordon-dry-run" and "not cordoned" in memory["status_reason"]
    assert cards["gpu-node-02 0000:ca:00.0"]["status"] == "cordon-dry-run"  # its node's cordon, no fault of its own
    assert cards["gpu-node-01 0000:3b:00.0"]["status"] == "ok"
    # The inventories hold no VBIOS; the nvidia-smi -q captured at the fault does (not for the card that
    # fell off the bus: its capture failed).
    assert (memory["vbios"], memory["vbios_from"]) == ("96.00.99.00.01", "evidence")
    assert (bus["vbios"], bus["vbios_from"]) == (None, None)
    table = run(history, "gpus", "list").stdout
    assert any(ln.startswith("gpu-node-03") and " faulted,cordoned " in ln for ln in table.splitlines())
    card = run(history, "gpus", "history", "1654923008817").stdout
    assert "status faulted,cordon-dry-run: open: memory 9af48e8" in card and "96.00.99.00.01 (evidence)" in card


def test_yaml_says_what_json_says(history: History) -> None:
    for args in (("incidents", "list"), ("incidents", "show", MEMORY), ("gpus", "list"), ("stats",)):
        proc = run(history, *args, "-o", "yaml")
        assert proc.returncode == 0, proc.stderr
        assert yaml.safe_load(proc.stdout) == data(history, *args), args
    assert run(history, "incidents", "list", "--json").stdout == run(history, "incidents", "list", "-o", "json").stdout
    bad = run(history, "incidents", "list", "-o", "xml")
    assert bad.returncode == 2 and "unknown output format 'xml'" in bad.stderr


def test_piped_show_cuts_no_id(history: History, tmp_path: Path) -> None:
    proc = run(history, "incidents", "show", MEMORY)
    assert proc.returncode == 0 and "…" not in proc.stdout
    assert all(i in proc.stdout for i in (NLP_SHELL, MEMORY))
    screen = in_terminal("incidents", "show", MEMORY, "--database-url", history.url, columns=100)
    assert screen.code == 0 and all(cell_len(ln) <= 100 for ln in screen.lines)


def test_stats_gives_the_time_to_resolve_and_between_hardware_incidents(history: History) -> None:
    hardware = [i for i in data(history, "incidents", "list", "--all")["incidents"]
                if i["component"] in ("gpu", "nvswitch", "node") and i["category"] != "application"
                and not i["merged_into"]]
    rel = data(history, "stats")["reliability"]
    assert rel["all"]["incidents"] == len(hardware) > 0
    assert rel["all"]["resolved"] == sum(1 for i in hardware if i["resolved_at"])
    assert {n: f["incidents"] for n, f in rel["by_node"].items()} == {
        n: sum(1 for i in hardware if i["node"] == n) for n in {i["node"] for i in hardware}}
    assert sum(f["incidents"] for f in rel["by_pool"].values()) == len(hardware)
    text = run(history, "stats").stdout
    assert f"Reliability: {len(hardware)} hardware incidents" in text
    assert all(word in text for word in ("POOL", "GPU CARD", "MTTR", "MTBI"))
