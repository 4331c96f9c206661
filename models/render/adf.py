"""The Atlassian Document Format (ADF), the body of the description and comments on Jira Cloud
(REST API v3): a JSON tree, `{"version": 1, "type": "doc", "content": [...]}`.

ADF needs no escaping, but it has rules a plain JSON writer would break: a text node is never
empty, a table cell holds paragraphs, a code block holds unmarked text, a link is a mark on text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.render.doc import Block, Code, Heading, Inline, ItemList, Paragraph, Span, Table, flat

Node = dict[str, Any]


def _text(s: Span) -> Node | None:
    text = flat(s.text) or (s.href or "")
    if not text:
        return None
    marks: list[Node] = []
    if s.strong:
        marks.append({"type": "strong"})
    if s.code:
        marks.append({"type": "code"})
    if s.href:
        marks.append({"type": "link", "attrs": {"href": s.href}})
    node: Node = {"type": "text", "text": text}
    if marks:
        # A code mark combines only with a link: Jira refuses code with strong.
        if s.code:
            marks = [m for m in marks if m["type"] != "strong"]
        node["marks"] = marks
    return node


def paragraph(spans: Inline) -> Node:
    content = [n for n in (_text(s) for s in spans) if n is not None]
    return {"type": "paragraph", "content": content} if content else {"type": "paragraph"}


def _cell(kind: str, spans: Inline) -> Node:
    return {"type": kind, "attrs": {}, "content": [paragraph(spans)]}


def _table(b: Table) -> Node:
    rows: list[Node] = []
    if b.header:
        rows.append({"type": "tableRow", "content": [_cell("tableHeader", (Span(h),)) for h in b.header]})
        rows += [{"type": "tableRow", "content": [_cell("tableCell", c) for c in row]} for row in b.rows]
    else:
        rows += [{"type": "tableRow", "content": [_cell("tableHeader", row[0]),
                                                  *(_cell("tableCell", c) for c in row[1:])]} for row in b.rows]
    return {"type": "table", "attrs": {"isNumberColumnEnabled": False, "layout": "default"}, "content": rows}


def _block(b: Block) -> Node | None:
    if isinstance(b, Heading):
        text = flat(b.text)
        return {"type": "heading", "attrs": {"level": b.level},
                "content": [{"type": "text", "text": text}] if text else []}
    if isinstance(b, Paragraph):
        return paragraph(b.spans)
    if isinstance(b, ItemList):
        if not b.items:
            return None
        return {"type": "orderedList" if b.ordered else "bulletList",
                "content": [{"type": "listItem", "content": [paragraph(item)]} for item in b.items]}
    if isinstance(b, Code):
        text = b.text.rstrip("\n")
        return {"type": "codeBlock", "attrs": {}, "content": [{"type": "text", "text": text}] if text else []}
    return _table(b) if b.rows else None


def render(blocks: Sequence[Block]) -> Node:
    return {"version": 1, "type": "doc", "content": [n for n in (_block(b) for b in blocks) if n is not None]}


def plain(text: str) -> Node:
    """A document of plain paragraphs (a comment), one per non-empty line."""
    lines = [line for line in text.splitlines() if line.strip()]
    return render([Paragraph((Span(line),)) for line in lines])
