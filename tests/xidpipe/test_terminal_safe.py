"""Text from nodes never reaches the terminal as control characters: every command's standard output
and error messages write them as visible escapes, and JSON output stays valid JSON that decodes to the
original text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xidpipe.cli import main
from xidpipe.commands.output import safe

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\\x9b31m\r\x7f\u202e"
RAW = set("\x1b\x07\x9b\r\x7f\u202e")
IN_LINE = ESCAPES.replace("\r", "")  # a carriage return ends a line of a file


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "node-1.log"
    path.write_text(f"[ 100.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=evil{IN_LINE}, "
                    f"Graphics Exception {IN_LINE}\n", encoding="utf-8")
    return path


def test_safe_escapes_every_control_character_but_newline_and_tab() -> None:
    out = safe("a\tb\nc" + ESCAPES)
    assert out.startswith("a\tb\nc")
    assert not RAW & set(out)
    assert "\\u001b[2J" in out and "\\u009b" in out and "\\u202e" in out
    assert json.loads(f'"{safe(chr(0x9b) + chr(0x7f))}"') == "\x9b\x7f"


@pytest.mark.parametrize("args", [["scan"], ["scan", "--json"], ["parse"]])
def test_commands_print_node_text_without_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             args: list[str]) -> None:
    main([*args, str(_log(tmp_path))])
    out = capsys.readouterr().out
    assert "evil" in out
    assert not RAW & set(out), repr(out)
    if "--json" in args or args == ["parse"]:
        decoded = [json.loads(line) for line in out.splitlines()] if args == ["parse"] else json.loads(out)
        text = decoded[0]["raw"] if args == ["parse"] else decoded[0]["processes"][0]
        assert IN_LINE.split(",")[0] in text


def test_error_messages_escape_a_hostile_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(tmp_path / f"missing{ESCAPES}.log")]) == 2
    err = capsys.readouterr().err
    assert "missing" in err and not RAW & set(err), repr(err)
