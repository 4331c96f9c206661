"""Tokens file, default tokens, signed sessions and query-parameter parsing."""

from __future__ import annotations

import os
import secrets
import stat
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from xidpipe.web.params import parse_date, parse_datetime
from xidpipe.web.session import Sessions
from xidpipe.web.tokens import (
    TokenFileError,
    TokenStore,
    ensure_default_tokens,
    load_tokens,
    parse_tokens,
    token_bits,
    tokens_file_exposure,
)

SECRET = "s3cret-Gm4xTq9wLv2bRk7pNz5c"


@pytest.mark.parametrize(("text", "says"), [
    ("alice read", "expected `name role token`"),
    (f"alice admin {SECRET}", "role must be one of read, operator"),
    ("alice read tiny-tok", "fewer than 128 bits"),
    ("alice read abcdefghijklmnop", "fewer than 128 bits"),  # 16 characters were enough before
    ("alice read 0123456789abcdef0123", "fewer than 128 bits"),  # 24 hex digits: 96 bits
    ("alice read " + "ab" * 40, "fewer than 128 bits"),  # long, but two characters
    ("alice read " + "abcdefgh" * 4, "fewer than 128 bits"),  # 32 characters, 8 distinct: 150 bits by their classes
    ("alice read " + "aBcD3fGh!" * 4, "fewer than 128 bits"),  # four classes, repeated
    ("alice read abcdefghijklmnopqrstuvwxyz012345", "fewer than 128 bits"),  # runs of consecutive characters
    ("alice read read-token-0123456789abcdef", "fewer than 128 bits"),
    ("alice read ZZZZZZZZZZZZZZZZZZZZyyyyyyyyyyyyyyyy7777777777qqqq", "fewer than 128 bits"),
    (f"alice read {SECRET}\nalice operator {SECRET}x", "appears twice"),
    (f"alice read {SECRET}\nbob operator {SECRET}", "also another name's token"),
])
def test_a_bad_tokens_file_says_where_and_never_shows_a_token(text: str, says: str) -> None:
    with pytest.raises(TokenFileError) as err:
        parse_tokens(text, "tokens")
    assert says in str(err.value) and SECRET not in str(err.value) and "tiny-tok" not in str(err.value)
    assert text.split()[-1] not in str(err.value)


def test_tokens_are_verified_to_their_name_and_role() -> None:
    store = TokenStore(parse_tokens(f"# comment\n\nalice read {SECRET}\nbob operator {SECRET}-op\n"))
    alice, bob = store.verify(SECRET), store.verify(f"{SECRET}-op")
    assert alice is not None and (alice.name, alice.role, alice.is_operator) == ("alice", "read", False)
    assert bob is not None and bob.is_operator
    assert store.verify(SECRET[:-1]) is None and store.verify("") is None
    assert store.principal("alice", "read") == alice and store.principal("alice", "operator") is None


def test_default_tokens_are_written_once_readable_by_the_owner_only(tmp_path: Path) -> None:
    path, created = ensure_default_tokens(tmp_path / "var" / "api-tokens")
    assert created and stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    store = load_tokens(path)
    assert len(store) == 2
    names = {line.split()[:2][0]: line.split()[1] for line in first.splitlines() if not line.startswith("#")}
    assert names == {"reader": "read", "operator": "operator"}
    assert ensure_default_tokens(path) == (path, False) and path.read_text() == first


def test_a_missing_tokens_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read the tokens file"):
        load_tokens(tmp_path / "nope")


def test_sessions_are_signed_expire_and_end_with_the_token() -> None:
    store = TokenStore(parse_tokens(f"alice operator {SECRET}"))
    who = store.verify(SECRET)
    assert who is not None
    sessions = Sessions(store, b"k" * 32, ttl_s=60)
    cookie = sessions.issue(who, now=1000)
    assert SECRET not in cookie
    assert sessions.verify(cookie, now=1030) == who
    assert sessions.verify(cookie, now=1061) is None  # expired
    assert Sessions(store, b"other" * 8).verify(cookie, now=1030) is None  # another server's secret
    assert Sessions(TokenStore([]), b"k" * 32).verify(cookie, now=1030) is None  # the token was removed
    csrf = sessions.csrf(cookie)
    assert sessions.check_csrf(cookie, csrf) and not sessions.check_csrf(sessions.issue(who, now=1001), csrf)
    assert not sessions.check_csrf("", sessions.csrf(""))


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-25T12:00:00Z", datetime(2026, 11, 25, 12, tzinfo=UTC)),
    ("2026-11-25t12:00:00.5z", datetime(2026, 11, 25, 12, 0, 0, 500000, tzinfo=UTC)),
    ("2026-11-25T12:00:00+02:00", datetime(2026, 11, 25, 10, tzinfo=UTC)),
    ("2026-11-25T12:00:00", datetime(2026, 11, 25, 12, tzinfo=UTC)),
    ("2026-11-25", datetime(2026, 11, 25, tzinfo=UTC)),
    ("2026-12-31T23:59:60Z", datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)),  # a leap second
    ("0001-01-01T00:00:00+01:00", datetime.min.replace(tzinfo=UTC)),
    ("9999-12-31T23:59:59-01:00", datetime.max.replace(tzinfo=UTC)),
    ("2026-02-30", None), ("yesterday", None), ("2026-11-25T12:00:00+24:00", None), ("", None),
])
def test_times(text: str, expected: datetime | None) -> None:
    assert parse_datetime(text) == expected


def test_dates() -> None:
    assert parse_date("2026-11-25") == date(2026, 11, 25)
    assert parse_date("2026-11-25T00:00:00Z") is None and parse_date("2026-13-01") is None


@pytest.mark.parametrize("token", [secrets.token_urlsafe(16), secrets.token_hex(16), secrets.token_urlsafe(32),
                                   "Zq7!x-9vLm#2Rt$8Kp&4Wc"])
def test_random_tokens_of_128_bits_are_accepted(token: str) -> None:
    assert token_bits(token) >= 128
    assert TokenStore(parse_tokens(f"alice read {token}")).verify(token) is not None


def test_a_predictable_token_is_refused_with_a_clear_reason() -> None:
    with pytest.raises(TokenFileError) as err:
        parse_tokens("alice read " + "abcdefgh" * 4, "api-tokens")
    message = str(err.value)
    assert message.startswith("api-tokens:1: the token of 'alice'") and "repeat" in message
    assert "abcdefgh" not in message
    assert "secrets.token_urlsafe(32)" in message
    assert 0 < token_bits("abcdefgh" * 4) < 64 and token_bits("abcdefgh" * 4) == token_bits("abcdefgh" * 8)


@pytest.mark.parametrize(("mode", "says"), [
    (0o600, None), (0o400, None), (0o640, None),  # the group is the server's own (the chart's fsGroup)
    (0o644, "readable by every user"), (0o604, "readable by every user"), (0o602, "writable by every user"),
])
def test_a_tokens_file_others_can_read_is_flagged(tmp_path: Path, mode: int, says: str | None) -> None:
    path = tmp_path / "api-tokens"
    path.write_text(f"alice read {SECRET}\n")
    path.chmod(mode)
    problem = tokens_file_exposure(path)
    assert (problem is None) if says is None else (says in (problem or "") and str(path) in (problem or ""))


def test_a_tokens_file_readable_by_a_group_the_server_is_not_in_is_flagged(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another group needs root")
    foreign = max([*os.getgroups(), os.getgid()]) + 4242
    path = tmp_path / "api-tokens"
    path.write_text(f"alice read {SECRET}\n")
    os.chown(path, -1, foreign)
    path.chmod(0o640)
    assert f"readable by group {foreign}" in (tokens_file_exposure(path) or "")


def test_a_revoked_session_is_dead_also_as_a_copy_and_others_live_on() -> None:
    store = TokenStore(parse_tokens(f"alice operator {SECRET}"))
    who = store.verify(SECRET)
    assert who is not None
    sessions = Sessions(store, b"k" * 32, ttl_s=60)
    mine, other = sessions.issue(who), sessions.issue(who)
    assert sessions.verify(mine) == who and sessions.revoke(mine)
    assert sessions.verify(mine) is None and sessions.verify(other) == who
    assert not sessions.revoke("forged.cookie")
