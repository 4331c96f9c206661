"""API tokens: read-only and operator, loaded from a file of `name role token` lines.

Tokens are compared in constant time (`hmac.compare_digest`) and never logged, echoed or rendered.
A token must carry 128 bits (`token_bits`: repeats and runs count once); a file other users can read
is used with a warning (`tokens_file_exposure`).
With no tokens configured, `ensure_default_tokens` writes a read and an operator token once into a
file readable only by its owner (mode 0600) and the server prints that file's path.
"""

from __future__ import annotations

import hmac
import math
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Role = Literal["read", "operator"]
ROLES: tuple[Role, ...] = ("read", "operator")
MIN_TOKEN_BITS = 128  # tokens that cannot carry this much are refused when the file is loaded
MIN_TOKEN_DISTINCT = 8  # distinct characters a token must use (refuses `aaaa...`, `abababab...`)
TOKENS_FILE_ENV = "XIDPIPE_WEB_TOKENS_FILE"
DEFAULT_TOKENS_FILE = Path("var/api-tokens")


class TokenFileError(ValueError):
    """The tokens file cannot be used; the message names the file and line, never a token."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: the token's name and role (never the token)."""

    name: str
    role: Role

    @property
    def is_operator(self) -> bool:
        return self.role == "operator"


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    secret: bytes


class TokenStore:
    def __init__(self, entries: list[tuple[str, Role, str]]) -> None:
        self._entries = [_Entry(Principal(name, role), token.encode("utf-8")) for name, role, token in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def verify(self, token: str) -> Principal | None:
        """The principal whose token this is; every entry is compared, in constant time each."""
        given = token.encode("utf-8")
        found: Principal | None = None
        for e in self._entries:
            if hmac.compare_digest(given, e.secret) and found is None:
                found = e.principal
        return found

    def principal(self, name: str, role: str) -> Principal | None:
        """The configured principal of that name and role (a session stays valid only while it is)."""
        for e in self._entries:
            if e.principal.name == name and e.principal.role == role:
                return e.principal
        return None


def token_bits(token: str) -> float:
    """The most bits `token` can carry: its unpredictable characters times log2 of the alphabet its
    character classes span (lower case, upper case, digits, other). Unpredictable: a token that repeats
    a shorter one (`abcdefgh` four times) counts that one only, and in a run of characters that step by
    the same -1, 0 or +1 (`aaaa`, `abcd`, `6543`) the characters after the third count nothing. A random
    token carries about as many bits; a chosen one fewer, which no count can see, so this is an upper
    bound used to refuse."""
    classes = [any(c.islower() and c.isascii() for c in token), any(c.isupper() and c.isascii() for c in token),
               any(c.isdigit() and c.isascii() for c in token), any(not (c.isascii() and c.isalnum()) for c in token)]
    alphabet = sum(size for size, present in zip((26, 26, 10, 32), classes, strict=True) if present)
    return _unpredictable(_period(token)) * math.log2(alphabet) if alphabet > 1 else 0.0


def _period(token: str) -> str:
    """The shortest string that `token` repeats (`token` itself when it repeats none)."""
    for size in range(1, len(token) // 2 + 1):
        if token == (token[:size] * (len(token) // size + 1))[:len(token)]:
            return token[:size]
    return token


def _unpredictable(text: str) -> int:
    """The characters of `text` that no run of equal steps (-1, 0 or +1) predicts past its third."""
    count, run, step = 0, 1, None
    for i, c in enumerate(text):
        d = ord(c) - ord(text[i - 1]) if i else None
        run = run + 1 if d is not None and d == step and abs(d) <= 1 else 2 if i else 1
        step = d
        count += run <= 3
    return count


def parse_tokens(text: str, source: str = "tokens file") -> list[tuple[str, Role, str]]:
    out: list[tuple[str, Role, str]] = []
    names: set[str] = set()
    secrets_seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3:
            raise TokenFileError(f"{source}:{n}: expected `name role token`, found {len(parts)} fields")
        name, role, token = parts
        if role not in ROLES:
            raise TokenFileError(f"{source}:{n}: role must be one of {', '.join(ROLES)}, not {role!r}")
        if token_bits(token) < MIN_TOKEN_BITS or len(set(token)) < MIN_TOKEN_DISTINCT:
            raise TokenFileError(f"{source}:{n}: the token of {name!r} carries fewer than {MIN_TOKEN_BITS} bits "
                                 f"(at most {token_bits(token):.0f}: a part it repeats, or a run of consecutive or "
                                 "equal characters, counts once): use a random one "
                                 "(`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
        if name in names:
            raise TokenFileError(f"{source}:{n}: the name {name!r} appears twice")
        if token in secrets_seen:
            raise TokenFileError(f"{source}:{n}: the token of {name!r} is also another name's token")
        names.add(name)
        secrets_seen.add(token)
        out.append((name, "operator" if role == "operator" else "read", token))
    return out


def tokens_file_exposure(path: Path) -> str | None:
    """Why other users than the server could read or change the tokens file, or None: it is readable or
    writable by every user, or by a group the server is not in. Readable by the server's own group is
    fine (the chart gives a Secret's file to the pod's fsGroup, mode 0440)."""
    try:
        st = path.stat()
    except OSError:
        return None  # `load_tokens` says why it cannot be read
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        what = "readable" if mode & stat.S_IROTH else "writable"
        return f"the tokens file {path} is {what} by every user (mode {mode:04o}): chmod 600 it"
    if mode & (stat.S_IRGRP | stat.S_IWGRP) and st.st_gid not in {os.getgid(), os.getegid(), *os.getgroups()}:
        what = "readable" if mode & stat.S_IRGRP else "writable"
        return f"the tokens file {path} is {what} by group {st.st_gid}, which this server is not in (mode {mode:04o})"
    return None


def load_tokens(path: Path) -> TokenStore:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenFileError(f"cannot read the tokens file {path}: {exc.strerror or exc}") from None
    return TokenStore(parse_tokens(text, str(path)))


def ensure_default_tokens(path: Path = DEFAULT_TOKENS_FILE) -> tuple[Path, bool]:
    """Write a read and an operator token to `path` (0600) unless it exists; returns (path, created)."""
    if path.exists():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    body = (
        "# xidpipe serve API tokens: name role token (roles: read, operator). Keep this file private.\n"
        f"reader read {secrets.token_urlsafe(32)}\n"
        f"operator operator {secrets.token_urlsafe(32)}\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(body)
    return path, True
