"""What the Jira stand-in checks in a ticket body, as the real Jira would take it.

- REST API v3 (Jira Cloud): the body is an ADF document, validated against Atlassian's published
  JSON schema (`adf_schema_v1_full.json`, see SCHEMA_SOURCE.md) with jsonschema-rs (the pure
  Python `jsonschema` takes about 2 s per dossier on this schema's nested `anyOf`s, longer than
  the Jira client waits in tests). Jira refuses an invalid one with 400 (`INVALID_INPUT`).
- REST API v2 (Server and Data Center): the body is wiki markup. Jira takes any string but
  renders broken markup badly, so the stand-in refuses what would render badly among the
  constructs xidpipe emits: Markdown (`|---|` rows, `#`/`##` headings, code fences, `**bold**`),
  tables whose rows disagree on their number of cells or do not end with `|`, `{noformat}` or
  `{code}` blocks left open, unknown `{macros}`, an unclosed `{{monospace}}`, an empty heading.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs

SCHEMA = Path(__file__).with_name("adf_schema_v1_full.json")
_MACROS = frozenset({"noformat", "code", "quote", "panel", "color", "anchor"})
_UNESCAPED = r"(?<!\\)"
_LINK = re.compile(_UNESCAPED + r"\[[^\]\n]*" + _UNESCAPED + r"\|[^\]\n]*" + _UNESCAPED + r"\]")
_MONO = re.compile(r"\{\{.*?\}\}")
_MACRO = re.compile(_UNESCAPED + r"\{(?!\{)([A-Za-z]+)(?::[^}]*)?\}")


@cache
def _validator() -> Any:
    return jsonschema_rs.validator_for(json.loads(SCHEMA.read_text(encoding="utf-8")))


def adf_errors(doc: Any) -> list[str]:
    """Why Jira Cloud would refuse `doc` as an ADF body ([] when it is valid)."""
    if not isinstance(doc, dict):
        return [f"an ADF document (a JSON object) is required, not {type(doc).__name__}"]
    errors = list(_validator().iter_errors(doc))[:5]
    return [f"{'/'.join(str(p) for p in e.instance_path) or '(root)'}: {e.message[:200]}" for e in errors]


def _cells(row: str) -> int:
    body = re.sub(_UNESCAPED + r"\|\|", "|", _MONO.sub("M", _LINK.sub("L", row)))  # `||` opens a header cell
    return len(re.findall(_UNESCAPED + r"\|", body)) - 1


def _table_errors(rows: list[tuple[int, str]]) -> list[str]:
    errors = []
    widths = set()
    for n, row in rows:
        if re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+\s*", row):
            errors.append(f"line {n}: a Markdown table separator (|---|)")
            continue
        if not row.rstrip().endswith("|") or row.rstrip().endswith("\\|"):
            errors.append(f"line {n}: a table row must end with |")
        widths.add(_cells(row))
    if len(widths) > 1:
        errors.append(f"line {rows[0][0]}: table rows with different numbers of cells")
    return errors


def wiki_errors(text: Any) -> list[str]:
    """Why `text` would render badly as Jira wiki markup ([] when it would not)."""
    if not isinstance(text, str):
        return [f"a wiki-markup string is required, not {type(text).__name__}"]
    errors: list[str] = []
    block: str | None = None
    table: list[tuple[int, str]] = []
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("#"):
        errors.append("line 1: a leading '#' is a Markdown heading (Jira renders a numbered list)")
    for n, ln in enumerate(text.splitlines(), 1):
        if block is not None:
            if ln.strip().startswith("{" + block):
                block = None
            continue
        opened = re.match(r"\{(noformat|code)(?::[^}]*)?\}\s*$", ln.strip())
        if opened:
            block = opened.group(1)
            continue
        if ln.startswith("|"):
            table.append((n, ln))
            continue
        if table:
            errors += _table_errors(table)
            table = []
        errors += _line_errors(n, ln)
    if table:
        errors += _table_errors(table)
    if block is not None:
        errors.append(f"a {{{block}}} block is never closed")
    return errors


def _line_errors(n: int, ln: str) -> list[str]:
    errors = []
    if re.match(r"\s*\|?\s*:?-{3,}", ln) and "|" in ln:
        errors.append(f"line {n}: a Markdown table separator (|---|)")
    if re.match(r"#{2,}\s", ln):
        errors.append(f"line {n}: a Markdown heading ('##')")
    if ln.strip().startswith("```"):
        errors.append(f"line {n}: a Markdown code fence")
    if re.search(_UNESCAPED + r"\*\*\S", ln):
        errors.append(f"line {n}: Markdown **bold**")
    if re.match(r"h[1-6]\.\s*$", ln):
        errors.append(f"line {n}: an empty heading")
    if ln.count("{{") != ln.count("}}"):
        errors.append(f"line {n}: an unclosed {{{{monospace}}}}")
    for m in _MACRO.finditer(_MONO.sub("M", ln)):
        if m.group(1) not in _MACROS:
            errors.append(f"line {n}: an unknown macro {{{m.group(1)}}}")
    return errors
