"""The one dead-letter format (`models.dead_letter`) that the stream worker and the responder write."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from models.dead_letter import ERROR_MAX_CHARS, DeadLetter

AT = datetime(2026, 11, 25, 15, 26, 51, 120000, tzinfo=UTC)


def letter(**over: object) -> DeadLetter:
    values: dict[str, object] = {"reason": "undecodable", "error": "JSONDecodeError: Expecting value",
                                 "topic": "xidpipe.node.kernel", "partition": 3, "offset": 1042,
                                 "key": b"gpu-node-07", "value": b"\xff\xfe not json", "at": AT}
    values.update(over)
    return DeadLetter(**values)  # type: ignore[arg-type]


def test_the_value_is_json_with_the_reason_the_source_the_time_and_the_original_bytes() -> None:
    body = json.loads(letter().to_json())
    assert body == {"reason": "undecodable", "error": "JSONDecodeError: Expecting value",
                    "topic": "xidpipe.node.kernel", "partition": 3, "offset": 1042,
                    "dead_lettered_at": "2026-11-25T15:26:51.120000+00:00",
                    "key_b64": base64.b64encode(b"gpu-node-07").decode(),
                    "value_b64": base64.b64encode(b"\xff\xfe not json").decode()}


@pytest.mark.parametrize("key, value", [(b"k", b"v"), (None, b"v"), (b"k", None), (None, None), (b"", b"")])
def test_a_dead_letter_reads_back_as_it_was_written(key: bytes | None, value: bytes | None) -> None:
    dead = letter(key=key, value=value, at=AT.astimezone(timezone(timedelta(hours=8))))
    again = DeadLetter.from_json(dead.to_json())
    assert again == dead and again.key == key and again.value == value


def test_headers_repeat_the_reason_and_where_the_message_was_read() -> None:
    assert dict(letter(reason="wrong_key", partition=0, offset=7).headers()) == {
        "xidpipe-dlq-reason": b"wrong_key", "xidpipe-dlq-topic": b"xidpipe.node.kernel",
        "xidpipe-dlq-partition": b"0", "xidpipe-dlq-offset": b"7"}


def test_a_long_error_is_cut_and_the_original_bytes_are_not() -> None:
    big = b"x" * 100_000
    dead = letter(error="e" * (ERROR_MAX_CHARS * 3), value=big)
    assert len(dead.error) == ERROR_MAX_CHARS
    assert DeadLetter.from_json(dead.to_json()).value == big


def test_the_time_must_say_its_zone() -> None:
    with pytest.raises(ValueError, match="timezone"):
        letter(at=datetime(2026, 11, 25, 15, 26, 51))


@pytest.mark.parametrize("value", [b"{not json", b"[]", b'{"reason": "x"}',
                                   json.dumps({**json.loads(letter().to_json()), "value_b64": "!!"}).encode()])
def test_what_is_not_a_dead_letter_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError):
        DeadLetter.from_json(value)
