"""Keep secrets out of everything xidpipe writes: logs, tickets, chat messages and dossiers.

`redact()` replaces secret values in free text: `key=value` and `key: value` pairs whose key names a
secret (token, password, pass, secret, api key, credential, auth ...), quoted values whole
(`password="two words"`), secret command-line flags (`--pass x`, `--token=x`), `curl -u user:pw`,
MySQL's `-ppw`, HTTP `Authorization` headers and bearer tokens, credentials in URLs (also with an
empty user, `redis://:pw@host`), PEM private-key blocks, JSON Web Tokens, and well-known provider
key shapes. Environment dumps (`env`, `/proc/<pid>/environ`) are removed whole by
`redact_environment()`; a command line captured as argv goes through `redact_argv()`. The
replacement keeps the key so a reader sees what was removed.

Every pattern starts only at the start of a word and never rescans text it has passed, so the time
taken is linear in the text's length (dossiers carry whole log windows).
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

_KEY = (
    r"(?:[\w.-]*(?:token|passw(?:or)?d|passwd|pwd|secret|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credential|auth(?:orization)?|session[_-]?id|cookie)[\w.-]*"
    # `PASS`, `DB_PASS`, `--pass`, `passphrase` (but not `bypass` or `passes`)
    r"|(?:[\w.-]*[_.-])?pass(?:phrase)?(?:[_.-][\w.-]*)?)"
)
_START = r"(?<![\w.-])"
_QUOTED = r"(?P<q>[\"'])(?P<quoted>(?:\\.|(?!(?P=q)).)*)(?P=q)?"
_PAIR = re.compile(
    rf"(?i){_START}(?P<key>{_KEY})(?P<sep>[\"']?[ \t]*[:=][ \t]*)"
    rf"(?:{_QUOTED}|(?P<value>(?:(?:bearer|basic|token)[ \t]+)?[^\s\",;&']+))"
)
_FLAG = re.compile(rf"(?i)(?<![\w-])(?P<key>--?{_KEY})(?P<sep>\s+)(?:{_QUOTED}|(?P<value>[^\s\"']+))")
_USER_FLAG = re.compile(
    r"(?<![\w-])(?P<key>-u|-U|--user|--proxy-user)(?P<sep>\s+|=)(?P<q>[\"']?)(?P<user>[^\s:\"']*):(?!//)[^\s\"']+"
)
_MYSQL = re.compile(r"(?i)(?<![\w-])(?:mysql[\w-]*|mariadb[\w-]*)(?P<args>[^\n]*)")
_MYSQL_P = re.compile(r"(?<!\S)-p(?=\S)[^\s\"']+")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_URL_CREDENTIALS = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)([^/\s:@]*):([^/\s@]+)@")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b")
_KNOWN = re.compile(
    r"\b(?:AKIA[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}|"
    r"sk-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,})\b"
)
_ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=.*$", re.M)
_FLAG_ARG = re.compile(rf"(?i)^--?{_KEY}$")
_MYSQL_ARG0 = re.compile(r"(?i)^(?:mysql[\w-]*|mariadb[\w-]*)$")
_USER_FLAGS = ("-u", "-U", "--user", "--proxy-user")


def _keep_key(m: re.Match[str]) -> str:
    if m["q"]:
        return f"{m['key']}{m['sep']}{m['q']}{REDACTED}{m['q']}"
    return f"{m['key']}{m['sep']}{REDACTED}"


def redact(text: str) -> str:
    """`text` with every secret-looking value replaced by `[REDACTED]`."""
    text = _PEM.sub(f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----", text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m[1]}{m[2]}:{REDACTED}@", text)
    text = _PAIR.sub(_keep_key, text)
    text = _FLAG.sub(_keep_key, text)
    text = _USER_FLAG.sub(lambda m: f"{m['key']}{m['sep']}{m['q']}{m['user']}:{REDACTED}", text)
    text = _MYSQL.sub(lambda m: m[0][: m.start("args") - m.start()] + _MYSQL_P.sub(f"-p{REDACTED}", m["args"]), text)
    text = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)
    text = _JWT.sub(REDACTED, text)
    return _KNOWN.sub(REDACTED, text)


def redact_environment(text: str) -> str:
    """An environment dump with every value removed (names are kept: they help, values may not)."""
    return _ENV_LINE.sub(lambda m: m[0].split("=", 1)[0] + "=" + REDACTED, text)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with secrets removed: secret flags' values (`--token X`, `--pass X`,
    `--password=X`), `curl -u user:pw`'s password, MySQL's `-ppw`, and inline secrets."""
    out: list[str] = []
    pending = ""  # "value": hide the next argument; "user": hide the password of the next `user:pw`
    mysql = bool(argv) and bool(_MYSQL_ARG0.match(argv[0].rsplit("/", 1)[-1]))
    for arg in argv:
        if pending == "value":
            out.append(REDACTED)
        elif pending == "user" and ":" in arg and "://" not in arg:
            out.append(arg.split(":", 1)[0] + ":" + REDACTED)
        elif mysql and arg.startswith("-p") and len(arg) > 2:
            out.append("-p" + REDACTED)
            continue
        else:
            out.append(redact(arg))
        if pending:
            pending = ""
        elif _FLAG_ARG.match(arg):
            pending = "value"
        elif arg in _USER_FLAGS:
            pending = "user"
    return out
