"""Node names: one validator (RFC 1123 subdomain, at most 253 characters), used wherever a name enters:
record keys, node records, replay's file names and the command line's node flags."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from models.dead_letter import DeadLetter
from models.node_names import MAX_NODE_NAME, node_name_problem
from models.node_records import KernelLine, encode_node_record
from models.topics import key_node
from streams.decode import decode_message

VALID = ["gpu-node-01", "a", "0", "node-1.rack-7.example.com", "ip-10-0-3-17.ec2.internal",
         "a" * MAX_NODE_NAME, ".".join(["n" * 63] * 4)[:MAX_NODE_NAME - 1] + "x"]

INVALID = [
    ("", "empty"),
    (".", "a lone dot"),
    ("..", "the parent directory"),
    ("node-a/../node-b", "a path"),
    ("javascript:alert(1)", "a URL"),
    ("a" * (MAX_NODE_NAME + 1), "too long"),
    ("Gpu-Node", "upper case"),
    ("gpu_node", "underscore"),
    ("-gpu", "leading hyphen"),
    ("gpu-", "trailing hyphen"),
    ("gpu..node", "empty label"),
    (".gpu", "leading dot"),
    ("gpu.", "trailing dot"),
    ("gpu node", "a space"),
    ("gpu\nnode", "a newline"),
    ("gpu\x00", "NUL"),
    ("gpü", "non-ASCII"),
    ("１２３", "non-ASCII digits"),
]


@pytest.mark.parametrize("name", VALID)
def test_a_kubernetes_node_name_is_valid(name: str) -> None:
    assert node_name_problem(name) is None


@pytest.mark.parametrize(("name", "why"), INVALID, ids=[w for _, w in INVALID])
def test_anything_else_is_refused_with_a_reason(name: str, why: str) -> None:
    problem = node_name_problem(name)
    assert problem is not None and problem.startswith("not a node name") and why


@pytest.mark.parametrize(("key", "node"), [
    (b"gpu-node-1", b"gpu-node-1"),
    (b"gpu-node-1/inventory", b"gpu-node-1"),
    (b"gpu-node-1/gpu_processes", b"gpu-node-1"),
    (b"node-a/../node-b", None),  # the node-a part once passed node-a's token
    (b"node-a/inventory/x", None),
    (b"node-a/", None),
    (b"/inventory", None),
    (b"javascript:alert(1)", None),
    (b"Node-A/inventory", None),
    (b"\xff\xfe", None),
    (b"", None),
])
def test_a_key_names_a_node_only_when_it_is_a_node_name_and_at_most_a_kind(key: bytes, node: bytes | None) -> None:
    assert key_node(key) == node


@pytest.mark.parametrize("node", ["node-a/../node-b", ".", "javascript:alert(1)", "Node-A"])
def test_a_node_record_naming_no_node_is_refused(node: str) -> None:
    with pytest.raises(ValidationError, match="not a node name"):
        KernelLine(node=node, record_id="r", source="file", message="NVRM: Xid 79", fault=True)


def test_such_a_record_is_a_dead_letter_even_keyed_by_its_node() -> None:
    good = KernelLine(node="node-a", record_id="r", source="file", message="NVRM: Xid 79", fault=True)
    value = encode_node_record(good).replace(b'"node-a"', b'"node-a/../node-b"')
    out = decode_message(topic="xidpipe.node.kernel", partition=0, offset=3, key=b"node-a/../node-b", value=value,
                         kinds=frozenset({"kernel_line"}))
    assert isinstance(out, DeadLetter) and out.reason != "wrong_key" and "not a node name" in out.error
