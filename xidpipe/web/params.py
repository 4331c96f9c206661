"""Query parameters, declared once: the OpenAPI description is generated from these declarations
and requests are parsed with them, so the two cannot disagree. A bad value is a 400 problem."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from xidpipe.web.problems import Problem

Kind = Literal["string", "integer", "date-time", "date"]
NO_NUL = "^[^\\u0000]*$"  # PostgreSQL refuses NUL in text
_INT = re.compile(r"^-?[0-9]{1,19}$")
_DATE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")
_DATETIME = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})?)?$"
)
_MIN = datetime.min.replace(tzinfo=UTC)
_MAX = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: Kind
    description: str
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    default: int | str | None = None
    max_length: int = 253
    location: Literal["query", "path"] = "query"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any]
        if self.kind == "integer":
            out = {"type": "integer"}
            if self.minimum is not None:
                out["minimum"] = self.minimum
            if self.maximum is not None:
                out["maximum"] = self.maximum
        elif self.kind in ("date-time", "date"):
            out = {"type": "string", "format": self.kind}
        elif self.enum:
            out = {"type": "string", "enum": list(self.enum)}
        else:
            out = {"type": "string", "maxLength": self.max_length, "pattern": NO_NUL}
            if self.location == "path":
                out["minLength"] = 1
        if self.default is not None:
            out["default"] = self.default
        return out

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "in": self.location, "required": self.location == "path",
                "description": self.description, "schema": self.schema()}

    def parse(self, raw: str) -> Any:
        bad = Problem(400, "Bad query parameter", f"{self.name}: {self._expected()}, not {raw[:80]!r}")
        if self.kind == "integer":
            if not _INT.match(raw):
                raise bad
            n = int(raw)
            if (self.minimum is not None and n < self.minimum) or (self.maximum is not None and n > self.maximum):
                raise bad
            return n
        if self.kind == "date-time":
            value = parse_datetime(raw)
            if value is None:
                raise bad
            return value
        if self.kind == "date":
            d = parse_date(raw)
            if d is None:
                raise bad
            return d
        if self.enum and raw not in self.enum:
            raise bad
        if "\x00" in raw or len(raw) > self.max_length:
            raise bad
        return raw

    def _expected(self) -> str:
        if self.kind == "integer":
            lo = "" if self.minimum is None else f" ≥ {self.minimum}"
            hi = "" if self.maximum is None else f" ≤ {self.maximum}"
            return f"expected an integer{lo}{hi}".replace("≥ ", "at least ").replace("≤ ", "at most ")
        if self.kind == "date-time":
            return "expected an RFC 3339 time such as 2026-11-25T12:00:00Z (or a date)"
        if self.kind == "date":
            return "expected a date such as 2026-11-25"
        if self.enum:
            return f"expected one of {', '.join(self.enum)}"
        return f"expected text of at most {self.max_length} characters, without NUL"


def parse_date(raw: str) -> date | None:
    m = _DATE.match(raw)
    if not m:
        return None
    try:
        return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None


def parse_datetime(raw: str) -> datetime | None:
    """RFC 3339 (`Z` or an offset; a leap second counts as :59), a bare date (midnight UTC), or a
    time without offset (UTC). Times beyond the representable range are clamped to it."""
    m = _DATETIME.match(raw)
    if not m:
        return None
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    hh, mm, ss = (int(m[4]), int(m[5]), min(int(m[6]), 59)) if m[4] else (0, 0, 0)
    micro = int((m[7] or ".0")[1:7].ljust(6, "0"))
    try:
        naive = datetime(year, month, day, hh, mm, ss, micro)
    except ValueError:
        return None
    zone = (m[8] or "Z").upper()
    offset = timedelta(0)
    if zone != "Z":
        oh, om = int(zone[1:3]), int(zone[4:6])
        if oh > 23 or om > 59:
            return None
        offset = timedelta(hours=oh, minutes=om) * (1 if zone[0] == "+" else -1)
    try:
        return (naive - offset).replace(tzinfo=UTC)
    except OverflowError:
        return _MIN if offset > timedelta(0) else _MAX


def parse_query(params: tuple[Param, ...], query: Any, *, lenient: bool = False) -> dict[str, Any]:
    """`query` is a MultiDict. A repeated parameter is an error. `lenient` (the pages' forms): an
    empty value means the parameter is absent."""
    out: dict[str, Any] = {}
    for p in params:
        values = query.getall(p.name, [])
        if len(values) > 1:
            raise Problem(400, "Bad query parameter", f"{p.name}: given {len(values)} times, expected once")
        if not values or (values[0] == "" and (lenient or (p.kind == "string" and not p.enum))):
            out[p.name] = p.default
            continue
        out[p.name] = p.parse(values[0])
    return out
