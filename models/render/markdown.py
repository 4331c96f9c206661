"""GitHub-flavoured Markdown: the dossier file (`dossier.md`), the outbox ticket, `incidents show`."""

from __future__ import annotations

import re
from collections.abc import Sequence

from models.render.doc import Block, Code, Heading, Inline, ItemList, Paragraph, Span, flat

_SPECIAL = re.compile(r"([\\`*\[\]<>|#])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # `_x_` emphasises; `a_b` does not


def escape(text: str) -> str:
    return _EDGE_UNDERSCORE.sub(r"\\_", _SPECIAL.sub(r"\\\1", flat(text)))


def _span(s: Span) -> str:
    if s.code:
        text = flat(s.text).replace("`", "'")
        out = f"`{text}`"
    else:
        out = escape(s.text)
    if s.strong and out.strip():
        out = f"**{out}**"
    if s.href:
        out = f"[{out}](<{s.href.replace('>', '%3E').replace(' ', '%20')}>)"
    return out


def inline(spans: Inline) -> str:
    return "".join(_span(s) for s in spans)


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    return "`" * (longest + 1)


def _block(b: Block) -> list[str]:
    if isinstance(b, Heading):
        return ["#" * b.level + " " + escape(b.text), ""]
    if isinstance(b, Paragraph):
        return [inline(b.spans), ""]
    if isinstance(b, ItemList):
        return [(f"{n}. " if b.ordered else "- ") + inline(item) for n, item in enumerate(b.items, 1)] + [""]
    if isinstance(b, Code):
        fence = _fence(b.text)
        return [fence, b.text.rstrip("\n"), fence, ""]
    header = b.header or ("", "")
    out = ["| " + " | ".join(escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in b.rows:
        cells = [inline(c) for c in row]
        if not b.header and cells[0]:
            cells[0] = f"**{cells[0]}**"
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def render(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        out += _block(b)
    return "\n".join(out).rstrip("\n") + "\n"
