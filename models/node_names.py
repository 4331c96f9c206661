"""Node names: what a name must be wherever one enters xidpipe.

A Kubernetes node name is a DNS subdomain as RFC 1123 spells it (Kubernetes' `IsDNS1123Subdomain`):
lower-case letters, digits and `-`, in labels separated by `.`, each label starting and ending with a
letter or digit, at most 253 characters in all. xidpipe refuses anything else at every entry: a
record's key (`models.topics.key_node`) and body (`models.node_records.NodeRecordBase.node`), replay's
file names (`xidpipe.replay.layout`) and the command line's node flags. A name that is a path
(`node-a/../node-b`: a request path, a file name or a cordon's URL would resolve it to another
node), a URL (`javascript:alert(1)` in a page's link) or a control character (in a log line) never
gets further than the edge.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

MAX_NODE_NAME = 253
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*", re.ASCII)


def node_name_problem(name: str) -> str | None:
    """None when `name` is a node name, else why not (the name shown escaped and cut to 80 characters)."""
    if len(name) > MAX_NODE_NAME:
        return f"not a node name: {len(name)} characters, more than {MAX_NODE_NAME}"
    if not _SUBDOMAIN.fullmatch(name):
        return (f"not a node name: {name[:80]!r} (a node name is an RFC 1123 subdomain: lower-case letters, "
                "digits, '-' and '.', starting and ending with a letter or digit)")
    return None


def check_node_name(name: str) -> str:
    """`name` when it is a node name; ValueError saying why not otherwise."""
    problem = node_name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


NodeName = Annotated[str, AfterValidator(check_node_name)]  # a pydantic field that is a node name
