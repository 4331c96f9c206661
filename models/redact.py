"""Keep secrets out of everything xidpipe writes: logs, tickets, chat messages and dossiers.

`redact()` replaces secret values in free text: `key=value` and `key: value` pairs whose key names a
secret (token, password, secret, api key, credential, auth ...), HTTP `Authorization` headers and
bearer tokens, credentials in URLs, PEM private-key blocks, JSON Web Tokens, and well-known
provider key shapes. Environment dumps (`env`, `/proc/<pid>/environ`) are removed whole by
`redact_environment()`. The replacement keeps the key so a reader sees what was removed.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

_KEY = (
    r"[\w.-]*(?:token|passw(?:or)?d|passwd|pwd|secret|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credential|auth(?:orization)?|session[_-]?id|cookie)[\w.-]*"
)
_PAIR = re.compile(
    rf"(?i)(?P<key>\b{_KEY})(?P<sep>\"?\s*[:=]\s*\"?)(?P<value>(?:(?:bearer|basic|token)\s+)?[^\s\",;&]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s:@]+):([^/\s@]+)@")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b")
_KNOWN = re.compile(
    r"\b(?:AKIA[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}|"
    r"sk-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,})\b"
)
_ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=.*$", re.M)


def redact(text: str) -> str:
    """`text` with every secret-looking value replaced by `[REDACTED]`."""
    text = _PEM.sub(f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----", text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m[1]}{m[2]}:{REDACTED}@", text)
    text = _PAIR.sub(lambda m: f"{m['key']}{m['sep']}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)
    text = _JWT.sub(REDACTED, text)
    return _KNOWN.sub(REDACTED, text)


def redact_environment(text: str) -> str:
    """An environment dump with every value removed (names are kept: they help, values may not)."""
    return _ENV_LINE.sub(lambda m: m[0].split("=", 1)[0] + "=" + REDACTED, text)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with secret flags' values (`--token X`, `--password=X`) and inline secrets removed."""
    out: list[str] = []
    hide_next = False
    flag = re.compile(rf"(?i)^--?{_KEY}$")
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if flag.match(arg):
            out.append(arg)
            hide_next = True
            continue
        out.append(redact(arg))
    return out
