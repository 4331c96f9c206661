"""What the documentation states, read as data: its files, its code, the `xidpipe` command lines in it,
and the sentences and table rows that claim something (an exit status, a setting, an RBAC right)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS: tuple[Path, ...] = (
    ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md",
    *sorted((ROOT / "deploy" / "helm").glob("*/README.md")),
)
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
_PROMPT = re.compile(r"^(?:\$ |\.venv/bin/|kubectl .*? -- )")
_END = {"|", "||", "&", "&&", ";", ">", ">>", "<", "2>&1"}


@dataclass(frozen=True)
class Where:
    doc: Path
    line: int

    def __str__(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class CommandLine:
    where: Where
    text: str
    tokens: tuple[str, ...]  # after `xidpipe`, up to a pipe, redirection or comment
    block: bool  # in a code block (a command to run), not a span of prose (which may name a command)

    @property
    def literal(self) -> bool:
        """A code block's line without placeholder, optional part or alternative: a command a reader
        may paste as it is."""
        return self.block and not any(_placeholder(t) or "|" in t or t.startswith("[") or t.endswith("]")
                                      for t in self.tokens)


def _placeholder(token: str) -> bool:
    bare = token.strip("[]").split("=", 1)[-1]
    return bare in ("...", "…", "X") or bool(re.fullmatch(r"<[^>]*>:?|[A-Z][A-Z_|]*", bare))


def relative(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def text_of(doc: Path) -> str:
    return doc.read_text(encoding="utf-8")


def fenced(doc: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line inside a fenced code block, continuation lines joined."""
    text = text_of(doc)
    for block in _FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        pending, start = "", 0
        for n, line in enumerate(block.group(1).splitlines()):
            if not pending:
                start = first + n
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, pending + line
            pending = ""


def inline(doc: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every inline code span outside the fenced blocks (`\\|` read as `|`)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text_of(doc))
    for n, line in enumerate(text.splitlines(), 1):
        for span in _INLINE.finditer(line.replace("\\|", "\x00")):
            yield n, span.group(1).replace("\x00", "|")


def command_lines() -> list[CommandLine]:
    """Every `xidpipe ...` the documentation writes in code, as a reader would type it."""
    out: list[CommandLine] = []
    for doc in DOCS:
        for block, (n, raw) in [*((True, x) for x in fenced(doc)), *((False, x) for x in inline(doc))]:
            text = re.sub(r"<[^<>]*>", "PLACEHOLDER", _PROMPT.sub("", raw.strip()))
            if not text.startswith("xidpipe ") or re.match(r"xidpipe [\w-]+:|xidpipe PLACEHOLDER", text):  # output
                continue
            try:
                words = shlex.split(text.replace("\x00", ""), comments=True)
            except ValueError:
                words = text.split()
            tokens: list[str] = []
            for word in words[1:]:
                if word in _END or word.startswith((">", "2>")):
                    break
                tokens.append(word)
            out.append(CommandLine(Where(doc, n), text, tuple(tokens), block))
    return out


def paragraphs(doc: Path) -> Iterator[tuple[int, str]]:
    """(first line, text) of each paragraph, list item, table row, heading or code line, whitespace folded."""
    start, buf, in_code = 0, [], False
    for n, line in enumerate([*text_of(doc).splitlines(), ""], 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_code = not in_code
        single = in_code or stripped.startswith(("| ", "#", "```"))
        if buf and (not stripped or single or stripped.startswith(("- ", "* ")) or re.match(r"\d+\. ", stripped)):
            yield start, " ".join(buf)
            buf = []
        if not stripped:
            continue
        if single:
            yield n, stripped
        else:
            if not buf:
                start = n
            buf.append(stripped)
