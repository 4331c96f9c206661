"""A small document model: the blocks and inline spans a ticket body is made of.

Text is plain: a renderer escapes it for its format. Newlines inside inline text become spaces
(a table cell or a list item is one line in every format); only a `Code` block keeps its lines.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    text: str
    strong: bool = False
    code: bool = False
    href: str | None = None  # a link to this URL, the text its label


Inline = tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class Heading:
    level: int  # 1-6
    text: str


@dataclass(frozen=True, slots=True)
class Paragraph:
    spans: Inline


@dataclass(frozen=True, slots=True)
class Table:
    """`header`: the column names, or () for a key/value table whose first column names each row."""

    header: tuple[str, ...]
    rows: tuple[tuple[Inline, ...], ...]


@dataclass(frozen=True, slots=True)
class ItemList:
    items: tuple[Inline, ...]
    ordered: bool = False


@dataclass(frozen=True, slots=True)
class Code:
    text: str


Block = Heading | Paragraph | Table | ItemList | Code


def span(text: object) -> Span:
    return Span(str(text))


def strong(text: object) -> Span:
    return Span(str(text), strong=True)


def mono(text: object) -> Span:
    return Span(str(text), code=True)


def link(label: object, href: str) -> Span:
    return Span(str(label), href=href)


def line(*parts: Span | str) -> Inline:
    """Inline content from spans and plain strings."""
    return tuple(p if isinstance(p, Span) else Span(p) for p in parts if not isinstance(p, str) or p)


def flat(text: str) -> str:
    """Inline text on one line."""
    return " ".join(text.split()) if ("\n" in text or "\r" in text or "\t" in text) else text
