"""Fault codes as people type them in a filter."""

from __future__ import annotations

import pytest

from models.code_query import code_texts, parse_code_query


@pytest.mark.parametrize(("typed", "codes"), [
    ("Xid 48", ("Xid 48",)), ("xid:48", ("Xid 48",)), ("XID-48", ("Xid 48",)), ("xid48", ("Xid 48",)),
    ("SXid 12028", ("SXid 12028",)), ("sxid:12028", ("SXid 12028",)), (" SXID 12028 ", ("SXid 12028",)),
    ("48", ("Xid 48", "SXid 48")), ("12028", ("Xid 12028", "SXid 12028")),  # a bare number: either kind
])
def test_codes(typed: str, codes: tuple[str, ...]) -> None:
    assert code_texts(parse_code_query(typed)) == codes


@pytest.mark.parametrize("typed", ["", "Xid", "Xid forty", "NVLink 74", "48,63", "-48", "xid 1e3", "1234567890"])
def test_anything_else_is_refused_with_the_forms(typed: str) -> None:
    with pytest.raises(ValueError, match=r"not a fault code: .*\(examples: Xid 48, xid:48, SXid 12028"):
        parse_code_query(typed)
