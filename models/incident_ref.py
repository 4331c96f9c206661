"""How people name an incident, and the short id the command line shows for one.

An incident id is `v<N>:<16 hex>@<opened, UTC>` (`v2:9af48e81bb6cb563@20261125T125203.000000Z`): the
fingerprint of its component (`models.identity`) and when it was opened. People meet it in other forms:

- a ticket's key and label (`v2-9af48e81bb6cb563-20261125t125203.000000z`, `xidpipe-inc-v2-...`):
  `models.ticket_policy.label_safe` lower-cases it and turns `:` and `@` into `-`;
- the bare fingerprint (`v2:9af48e81bb6cb563`, its label `xidpipe-fp-v2-9af48e81bb6cb563`), which
  names every incident of one component (a recurrence opens a new incident with the same one);
- the hex alone (`9af48e81bb6cb563`), and a prefix of any of these: the short id the tables show
  (`9af48e8`) is the hex's shortest prefix, at least `SHORT_ID_MIN` characters, that no other
  incident's id starts with (as `git` shortens commit ids).

`id_prefixes` turns what was typed into the canonical prefixes it may stand for; the history
matches them against incident ids and fingerprints (`history.incident_ids`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from models.identity import FINGERPRINT_VERSION

SHORT_ID_MIN = 7  # as git: unique today and still, mostly, when the history has grown
VERSIONS: tuple[int, ...] = tuple(range(1, FINGERPRINT_VERSION + 1))
_LABEL_PREFIXES = ("xidpipe-inc-", "xidpipe-fp-")
_VERSIONED = re.compile(r"v(?P<version>\d{1,3})[:-](?P<rest>.*)", re.IGNORECASE | re.DOTALL)
_REST = re.compile(r"(?P<hex>[0-9a-fA-F]*)(?:(?P<sep>[@-])(?P<opened>.*))?", re.DOTALL)
# The opening time as an id writes it (`20261125T125203.000000Z`), or the start of it.
_OPENED = re.compile(r"\d{0,8}(?:t\d{0,6}(?:\.\d{0,6}z?)?)?", re.IGNORECASE)


def _canonical_rest(rest: str) -> str | None:
    """`<hex>[@<opened>]` from the part of an id after `v<N>:` in any of its forms, or None when it
    cannot be part of an id (a prefix may stop anywhere)."""
    found = _REST.fullmatch(rest)
    if found is None:
        return None
    hexpart = found["hex"].lower()
    if found["sep"] is None:
        return hexpart
    if len(hexpart) != 16 or not _OPENED.fullmatch(found["opened"]):
        return None
    return f"{hexpart}@{found['opened'].upper()}"


def id_prefixes(text: str) -> tuple[str, ...]:
    """The canonical id prefixes `text` may stand for, most specific first: the id or fingerprint
    itself, a ticket's form of either, or the hex without its version (any version)."""
    text = text.strip()
    for prefix in _LABEL_PREFIXES:
        if text.lower().startswith(prefix):
            text = text[len(prefix):]
            break
    found = _VERSIONED.fullmatch(text)
    if found is not None:
        rest = _canonical_rest(found["rest"])
        return () if rest is None else (f"v{int(found['version'])}:{rest}",)
    rest = _canonical_rest(text)
    if not rest:
        return ()
    return tuple(f"v{v}:{rest}" for v in reversed(VERSIONS))


def strip_version(incident_id: str) -> str:
    """`9af48e81bb6cb563@...` from `v2:9af48e81bb6cb563@...`: what short ids are prefixes of."""
    head, sep, rest = incident_id.partition(":")
    return rest if sep and head[:1] == "v" and head[1:].isdigit() else incident_id


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def short_id(incident_id: str, neighbours: Iterable[str]) -> str:
    """The shortest prefix (at least `SHORT_ID_MIN` characters) of `incident_id` without its version
    that none of `neighbours` (other incidents' ids, any version) starts with. Given the ids next to
    it in sorted order, under each version, that is the shortest prefix unique in the history."""
    own = strip_version(incident_id)
    longest = max((common_prefix(own, strip_version(n)) for n in neighbours if n != incident_id), default=0)
    return own[:max(SHORT_ID_MIN, longest + 1)]


def probe_keys(incident_id: str, versions: Sequence[int] = VERSIONS) -> tuple[str, ...]:
    """Where to look for the ids nearest to `incident_id` under each version (`short_id`'s neighbours)."""
    own = strip_version(incident_id)
    return tuple(f"v{v}:{own}" for v in versions)
