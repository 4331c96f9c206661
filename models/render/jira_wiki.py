"""Jira wiki markup, the text format of the description and comments on Jira Server and Data Center
(REST API v2).

Escaping: a backslash before each character that starts markup (`* _ - + ^ ~ { } [ ] | ! # \\`,
and the second `?` of `??`), except where Jira reads it as plain text anyway (a hyphen or
underscore inside a word, as in `gpu-node-03`), so that user text (pod names, reasons, kernel
lines) never turns into formatting, a table cell boundary, a macro or a link. Captured output
goes in `{noformat}` blocks, where nothing is interpreted; a `{noformat}` inside a capture is
written `{ noformat}` so the block cannot end early.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote

from models.render.doc import Block, Code, Heading, Inline, ItemList, Paragraph, Span, flat

_ALWAYS = re.compile(r"([\\*{}\[\]|!#^~])")
_AT_WORD_EDGE = re.compile(r"(?<![A-Za-z0-9])([-_+])|([-_+])(?![A-Za-z0-9])")


def escape(text: str) -> str:
    out = _ALWAYS.sub(r"\\\1", flat(text))
    out = _AT_WORD_EDGE.sub(lambda m: "\\" + (m.group(1) or m.group(2)), out)
    return out.replace("??", "?\\?")  # `??text??` is a citation


def _url(href: str) -> str:
    return quote(href, safe=":/?&=%#@;,+~._-")


def _span(s: Span) -> str:
    if s.code:
        text = escape(s.text).replace("{{", "\\{\\{")
        out = "{{" + text + "}}" if text else ""
    else:
        out = escape(s.text)
    if s.strong and out.strip():
        lead, core, trail = re.match(r"(\s*)(.*?)(\s*)$", out).groups()  # type: ignore[union-attr]
        out = f"{lead}*{core}*{trail}"
    if s.href:
        out = f"[{out or escape(s.href)}|{_url(s.href)}]"
    return out


def inline(spans: Inline) -> str:
    return "".join(_span(s) for s in spans)


def _cell(spans: Inline) -> str:
    return inline(spans) or " "  # Jira drops an empty cell; a space keeps the column


def _block(b: Block) -> list[str]:
    if isinstance(b, Heading):
        return [f"h{b.level}. {escape(b.text)}", ""]
    if isinstance(b, Paragraph):
        return [inline(b.spans), ""]
    if isinstance(b, ItemList):
        return [("# " if b.ordered else "* ") + inline(item) for item in b.items] + [""]
    if isinstance(b, Code):
        body = b.text.rstrip("\n").replace("{noformat}", "{ noformat}")
        return ["{noformat}", body, "{noformat}", ""]
    out: list[str] = []
    if b.header:
        out.append("||" + "||".join(escape(h) or " " for h in b.header) + "||")
        out += ["|" + "|".join(_cell(c) for c in row) + "|" for row in b.rows]
    else:
        out += ["||" + _cell(row[0]) + "|" + "|".join(_cell(c) for c in row[1:]) + "|" for row in b.rows]
    return [*out, ""]


def render(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        out += _block(b)
    return "\n".join(out).rstrip("\n") + "\n"
