"""Every `xidpipe` command line the documentation writes is one the command line takes: its commands
and sub-commands exist, its flags are the command's (or a level's above it), the values it gives a
closed set are in the set, and a line without placeholders parses as it stands."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Iterator

import pytest

from tests.docs.doctext import CommandLine, command_lines
from xidpipe.cli import build_parser

LINES = command_lines()
PARSER = build_parser()


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)


def _literal(token: str) -> bool:
    return not (token.isupper() or token.startswith("<") or token in ("...", "X") or "=" in token)


def _check_value(action: argparse.Action, value: str) -> str | None:
    """Why `value` is not one `action` takes (None when it is, or when it is a placeholder)."""
    for alt in value.strip("[]").split("|"):
        if not alt or not _literal(alt):
            continue
        if action.choices is not None and alt not in action.choices:
            return f"{alt!r} is not one of {sorted(action.choices)}"
        if callable(action.type) and getattr(action.type, "__module__", "") != "builtins":
            try:
                action.type(alt)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                return f"{alt!r}: {exc}"
    return None


def problems(tokens: tuple[str, ...], parsers: tuple[argparse.ArgumentParser, ...]) -> Iterator[str]:
    """What in `tokens` the parser chain `parsers` (outermost first) does not take."""
    parser = parsers[-1]
    options = {s: a for p in parsers for a in p._actions for s in a.option_strings}
    positionals = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    sub = _subparsers(parser)
    i = 0
    while i < len(tokens):
        token = tokens[i].strip("[]")
        if token.startswith("-") and "|" in token and all(a.startswith("-") for a in token.split("|")):
            # alternatives, `--active|--stuck`: each must be an option taking no value
            for name in token.split("|"):
                action = options.get(name)
                if action is None or action.nargs != 0:
                    yield f"{name} is no flag of `xidpipe {' '.join(p.prog.split()[-1] for p in parsers[1:])}`"
        elif token.startswith("-") and len(token) > 1:
            name = token.split("=", 1)[0]
            action = options.get(name)
            if action is None:
                yield f"{name} is no option of `xidpipe {' '.join(p.prog.split()[-1] for p in parsers[1:])}`"
            elif action.nargs != 0:
                value = token.split("=", 1)[1] if "=" in token else (tokens[i + 1] if i + 1 < len(tokens) else "")
                i += 0 if "=" in token else 1
                why = _check_value(action, value) if value and not value.startswith("-") else None
                if why:
                    yield f"{name} {why}"
        elif sub is not None:
            names = [n for n in token.split("|") if n]
            unknown = [n for n in names if n not in sub.choices]
            if unknown and _literal(token):
                yield f"{unknown} are no commands under `{parser.prog}`"
                return
            for n in names:
                if n in sub.choices:
                    yield from problems(tokens[i + 1:], (*parsers, sub.choices[n]))
            return
        elif positionals:
            action = positionals.pop(0)
            why = _check_value(action, token)
            if why:
                yield f"{action.dest}: {why}"
        i += 1


@pytest.mark.parametrize("line", LINES, ids=lambda c: f"{c.where} {c.text[:60]}")
def test_the_documented_command_is_the_command_lines(line: CommandLine) -> None:
    assert not list(problems(line.tokens, (PARSER,))), f"{line.where}: `{line.text}`"
    if line.literal and line.tokens:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                PARSER.parse_args(list(line.tokens))
            except SystemExit as exc:
                assert exc.code == 0, f"{line.where}: `{line.text}`: {err.getvalue().strip()}"


def test_the_documentation_names_every_command() -> None:
    """Each command and sub-command appears in a documented command line (none is undocumented)."""
    named: set[tuple[str, ...]] = set()
    for line in LINES:
        path: tuple[str, ...] = ()
        parser = PARSER
        for token in line.tokens:
            sub = _subparsers(parser)
            if sub is None or token.startswith("-"):
                break
            alts = [t for t in token.strip("[]").split("|") if t in sub.choices]
            if not alts:
                break
            named |= {(*path, a) for a in alts}
            path, parser = (*path, alts[0]), sub.choices[alts[0]]
    every: set[tuple[str, ...]] = set()

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        sub = _subparsers(p)
        for name, child in (sub.choices.items() if sub else ()):
            every.add((*path, name))
            walk(child, (*path, name))

    walk(PARSER, ())
    assert sorted(" ".join(c) for c in every - named) == []


def test_the_checker_finds_what_is_wrong() -> None:
    def wrong(text: str) -> list[str]:
        return list(problems(tuple(text.split()[1:]), (PARSER,)))

    assert wrong("xidpipe incidents list --xid 79 --category hardware --since 7d") == []
    assert wrong("xidpipe incidents lsit") and wrong("xidpipe incidents list --cateogry hardware")
    assert wrong("xidpipe incidents list --category hardwar") and wrong("xidpipe completion cmd")
    assert wrong("xidpipe breaker status|rest") and not wrong("xidpipe breaker status|reset")
    assert wrong("xidpipe gpus list --state in_service|gone")
