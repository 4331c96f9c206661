"""A fault code as people type it in a filter (`xidpipe incidents list --xid`, the API's `xid`).

    Xid 48, xid:48, xid48, XID-48     the Xid 48
    SXid 12028, sxid:12028            the SXid 12028 (an NVSwitch's)
    48, 12028                         a bare number: the Xid and the SXid of that number

The rule for a bare number is that it matches either kind: the driver's Xids and the NVSwitch's SXids
are numbered apart (NVIDIA's catalogs: Xids up to a few hundred, SXids from 10001), so `--xid 12028`
finds the SXid and `--xid 48` the Xid, and the one number never stands for two faults at once.
"""

from __future__ import annotations

import re

from models.vocabulary import CodeKind, FaultCode, code_text

FORMS = "Xid 48, xid:48, SXid 12028, sxid:12028, or a number (an Xid or an SXid)"
_CODE = re.compile(r"(?:(?P<kind>s?xid)\s*[:\s-]?\s*)?(?P<number>\d{1,9})", re.IGNORECASE)


def parse_code_query(text: str) -> tuple[FaultCode, ...]:
    """The codes `text` names; ValueError, naming the accepted forms, when it names none."""
    found = _CODE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"not a fault code: {text!r} (examples: {FORMS})")
    number = int(found["number"])
    kind = (found["kind"] or "").lower()
    if kind == "xid":
        return (FaultCode(CodeKind.XID, number),)
    if kind == "sxid":
        return (FaultCode(CodeKind.SXID, number),)
    return FaultCode(CodeKind.XID, number), FaultCode(CodeKind.SXID, number)


def code_texts(codes: tuple[FaultCode, ...]) -> tuple[str, ...]:
    """The codes as the history stores them (`Xid 48`, `SXid 12028`)."""
    return tuple(code_text(c) for c in codes)
