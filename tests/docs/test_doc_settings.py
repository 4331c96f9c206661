"""Every setting name the documentation writes is one a service reads, or one it refuses as removed
naming its replacement; and a replacement is never itself refused.

The settings classes are those `xidpipe config show` loads (`xidpipe.commands.config.classes`); the
names are what `service.config.env_name` makes of their fields. A name the docs give that is no
setting (the config file's `XIDPIPE_CONFIG`, the test fixtures' `XIDPIPE_TEST_*`) must be read by the
code as it is written.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from service.config import RENAMED, RENAMED_NESTED, ConfigError, check_renamed, env_name
from tests.docs.doctext import DOCS, ROOT, relative, text_of
from xidpipe.commands.config import classes

_NAME = re.compile(r"XIDPIPE_[A-Z0-9_]*(?:<[A-Z_]+>[A-Z0-9_<>]*|\*)?")
_SOURCES = ("models", "agents", "streams", "respond", "history", "service", "xidpipe", "tests", "deploy", "scripts")


def settings() -> dict[str, Any]:
    """Every setting's environment name, and its field (for the nested ones: `XIDPIPE_X__Y`)."""
    out: dict[str, Any] = {}
    for cls in classes():
        for name, field in cls.model_fields.items():
            out[env_name(cls, name)] = field
    return out


def _read_by_code(name: str) -> bool:
    for top in _SOURCES:
        for path in (ROOT / top).rglob("*"):
            if path.is_relative_to(ROOT / "tests" / "docs"):  # these checks name wrong names on purpose
                continue
            if path.suffix in (".py", ".yaml", ".sh", ".tpl") and name in path.read_text(errors="replace"):
                return True
    return any(name in (ROOT / f).read_text() for f in ("Makefile", "docker-compose.yml", "Dockerfile"))


def _removed(name: str) -> bool:
    return name in RENAMED or any(name.startswith(old) for old in RENAMED_NESTED)


def named() -> list[tuple[str, str]]:
    """(where, name) of every XIDPIPE_ name the documentation writes."""
    out = []
    for doc in DOCS:
        for n, line in enumerate(text_of(doc).splitlines(), 1):
            out += [(f"{relative(doc)}:{n}", m.group(0)) for m in _NAME.finditer(line)]
    return out


def problem(name: str, known: dict[str, Any]) -> str | None:
    """Why `name`, as the docs write it, names no setting (None: it does)."""
    if "<" in name:  # a pattern: XIDPIPE_<SERVICE>_<NAME>, XIDPIPE_WORKER_POLICY__<NAME>
        head = name.split("<", 1)[0]
        field = head.split("__", 1)[0]
        if head == "XIDPIPE_" or (field in known if "__" in head else any(k.startswith(head) for k in known)):
            return None
        return f"no setting is {head}..."
    if name.endswith("*") or name.endswith("_"):  # a family: XIDPIPE_SINKS_*, XIDPIPE_POLICY__*
        head = name.rstrip("*")
        return None if any(k.startswith(head) for k in [*known, *RENAMED]) or _removed(head) else \
            f"no setting starts {head}"
    if name in known or _removed(name):
        return None
    if "__" in name:  # a nested value: its field must be one (a mapping's keys are the user's)
        head = name.split("__", 1)[0]
        return None if head in known else f"{head} is no setting"
    return None if _read_by_code(name) else "neither a setting, a removed one, nor read by the code"


def test_every_setting_name_the_docs_write_is_read_or_refused_as_removed() -> None:
    known = settings()
    wrong = [f"{where}: {name}: {why}" for where, name in named() if (why := problem(name, known))]
    assert wrong == []


def test_a_removed_name_names_a_replacement_that_is_read_and_not_refused() -> None:
    known = settings()
    for old, new in RENAMED.items():
        replacement = new.split()[0]
        assert replacement in known, f"{old} names {replacement}, which no service reads"
        assert not _removed(replacement), f"{old} names {replacement}, which is refused as removed too"
    for old, new in RENAMED_NESTED.items():
        assert new.rstrip("_") in known and not _removed(new), (old, new)


@pytest.mark.parametrize("name", sorted(settings()))
def test_no_setting_a_service_reads_is_refused_as_removed(name: str) -> None:
    try:
        check_renamed({name: "1"})
    except ConfigError as exc:
        pytest.fail(f"{name} is read by a service and refused: {exc}")


def test_the_checker_finds_what_is_wrong() -> None:
    known = settings()
    assert problem("XIDPIPE_DATABSE_URL", known) and problem("XIDPIPE_NOPE_*", known)
    assert problem("XIDPIPE_WORKR_POLICY__QUIET_PERIOD_S", known)
    assert problem("XIDPIPE_DATABASE_URL", known) is None and problem("XIDPIPE_RESPOND_DATABASE_URL", known) is None
