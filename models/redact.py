"""Keep secrets out of everything xidpipe writes: logs, tickets, chat messages, dossiers, pages, the API.

`redact()` replaces secret values in free text:

- private-key blocks (PEM, OpenSSH, PGP), whole;
- token shapes recognisable by themselves (`models.secret_rules.TOKEN_RULES`: AWS key ids, GitHub,
  GitLab, Slack, Stripe, Google, npm, PyPI, JWTs, Slack webhook paths, Azure storage keys, ...);
- credentials in URLs (`scheme://user:pw@host`, also with an empty user or a space in the password);
- `key=value` and `key: value` pairs whose key names a secret (`models.secret_rules`: token, password,
  `PASS`, `AccountKey`, `sig`, `X-Amz-Signature`, ...), quoted values whole (`password="two words"`);
- secret command-line flags (`--pass x`, `--token=x`), `curl -u user:pw`, MySQL's `-ppw`,
  `sshpass -p pw`, `password hunter2`, HTTP `Authorization` headers and bearer tokens.

Environment dumps (`env`, `/proc/<pid>/environ`) are removed whole by `redact_environment()`; a command
line captured as argv goes through `redact_argv()`. The replacement keeps the key so a reader sees what
was removed.

**Linear time.** Python's `re` backtracks, so a pattern such as `[\\w.-]*token[\\w.-]*=` costs the
square of a word's length when it fails (`"token" * 40000` took minutes). Here every pattern (1) is
tried only where a word starts, or at a literal, (2) has bounded quantifiers wherever something must
follow, and (3) uses possessive quantifiers (`++`, `{n,}+`) where a value runs to its end, so no match
attempt costs more than a constant number of steps unless it succeeds, and what a match consumes is
never scanned again by that pattern. Private-key blocks are found with `str.find`. The text is then
redacted in pieces of at most `PIECE_CHARS` that end at a line end (secrets other than key blocks
never span lines), so no single call into the regex engine holds the interpreter for long and other
threads keep running. `benchmarks/redact_bench.py` measures it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from models.secret_rules import PROSE_AFTER_PASSWORD, SECRET_KEY_NAMES, SECRET_KEY_WORDS, TOKEN_RULES

REDACTED = "[REDACTED]"
PIECE_CHARS = 16 * 1024  # characters redacted per call into the regex engine (a longer line is one piece)
KEY_CHARS = 48  # characters of a key on either side of its secret word

_WORDS = "|".join(re.escape(w) for w in sorted(SECRET_KEY_WORDS, key=len, reverse=True))
_NAMES = "|".join(re.escape(w) for w in sorted(SECRET_KEY_NAMES, key=len, reverse=True))
# A key names a secret when it contains a secret word (`DB_PASSWORD`), or is a secret name standing alone
# or between `_`, `.` or `-` (`PASS`, `DB_PASS`, `--pass`, `passphrase`, `sig`, `X-Amz-Signature`; not
# `bypass`, `passes` or `design`). Checked on keys of at most KEY_CHARS characters.
_SECRET_KEY = re.compile(rf"(?i)(?:{_WORDS})|(?:^|[_.-])(?:{_NAMES})(?:$|[_.-])")
_KEY = rf"[\w.-]{{1,{KEY_CHARS}}}+(?![\w.-])"
_START = r"(?<![\w.-])"
_QUOTED = r"(?P<q>[\"'])(?P<quoted>(?:\\.|(?!(?P=q)).)*)(?P=q)?"
_VALUE = r"(?P<value>(?:(?:bearer|basic|token)[ \t]{1,8})?[^\s\",;&']++)"
# `key=`, `key: `, `"key": ` at a word start; the value after it is matched only when the key is secret.
_KEY_SEP = re.compile(rf"{_START}(?P<key>{_KEY})(?P<sep>[\"']?[ \t]{{0,16}}+[:=][ \t]{{0,16}}+)")
_PAIR_VALUE = re.compile(rf"(?i){_QUOTED}|{_VALUE}")
# `--key value`: the next word is the value only when the flag names a secret (`--verbose --token x`).
_FLAG_KEY = re.compile(rf"(?<![\w-])(?P<key>--?{_KEY})(?P<sep>[ \t]{{1,16}}+)")
_FLAG_VALUE = re.compile(rf"{_QUOTED}|(?P<value>[^\s\"']++)")
_USER_FLAG = re.compile(
    r"(?<![\w-])(?P<key>-u|-U|--user|--proxy-user)(?P<sep>[ \t]{1,16}+|=)(?P<q>[\"']?)(?P<user>[^\s:\"']{0,256}+)"
    r":(?!//)[^\s\"']++"
)
_MYSQL = re.compile(r"(?i)(?<![\w-])(?:mysql|mariadb)[\w-]{0,32}+(?P<args>[^\n]*+)")
_MYSQL_P = re.compile(r"(?<!\S)-p(?=\S)[^\s\"']++")
_SSHPASS = re.compile(r"(?<![\w-])(?P<key>sshpass(?:[ \t]{1,8}-[A-Za-oq-z]{1,8}){0,8}[ \t]{1,8}-p)(?P<sep>[ \t]{0,8}+)"
                      rf"(?:{_QUOTED}|(?P<value>[^\s\"']++))")
_PASSWORD_WORD = re.compile(r"(?i)(?<![\w.-])(?P<key>passw(?:or)?d|passphrase)(?P<sep>[ \t]{1,4}+)"
                            r"(?P<value>[^\s\"',;:=\[][^\s\"',;]{0,1024}+)")
_BEARER = re.compile(r"(?i)\b(bearer|basic)[ \t]{1,8}+[A-Za-z0-9._~+/=-]{8,}+")
# scheme://user:password@host. The password may hold a space (`postgresql://u:my pw@db`), never a line end,
# `/` or `@`; it ends at the last `@` before the host, within 256 characters.
_URL_CREDENTIALS = re.compile(
    r"(?i)(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]{0,31}://)(?P<user>[^/\s:@]{0,256}+):"
    r"(?P<pw>[^/\s@][^/@\n]{0,255}?)@(?=[\w\[])"
)
_TOKENS = re.compile("|".join(f"(?:{r.pattern})" for r in TOKEN_RULES))
_BLOCK_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]{1,16} ){0,4}PRIVATE KEY(?: BLOCK)?-----")
_BLOCK_END = re.compile(r"-----END (?:[A-Z0-9]{1,16} ){0,4}PRIVATE KEY(?: BLOCK)?-----")
_ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,256}+=.*$", re.M)
_FLAG_ARG = re.compile(rf"^--?{_KEY}$")
_MYSQL_ARG0 = re.compile(r"(?i)^(?:mysql[\w-]{0,32}|mariadb[\w-]{0,32})$")
_USER_FLAGS = ("-u", "-U", "--user", "--proxy-user")
_SSHPASS_ARG0 = "sshpass"


def _keep_key(m: re.Match[str]) -> str:
    if m["q"]:
        return f"{m['key']}{m['sep']}{m['q']}{REDACTED}{m['q']}"
    return f"{m['key']}{m['sep']}{REDACTED}"


def _token(m: re.Match[str]) -> str:
    """A token shape is a token only where a word starts (`xAKIA...` is no AWS key id)."""
    start = m.start()
    before = m.string[start - 1] if start else " "
    return m[0] if before.isalnum() or before == "_" else REDACTED


def _is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def _keyed(text: str, keys: re.Pattern[str], values: re.Pattern[str]) -> str:
    """`text` with the value after every key `keys` finds that names a secret replaced (`key=value`,
    `key: value`, `--key value`). The scan finds each key and its separator once; a value is matched
    only after a secret key, and a key found inside a value already replaced is skipped."""
    out: list[str] = []
    pos = 0
    for m in keys.finditer(text):
        if m.start() < pos or not _is_secret_key(m["key"]):
            continue
        value = values.match(text, m.end())
        if value is None:
            continue
        out.append(text[pos : m.end()])
        out.append(f"{value['q']}{REDACTED}{value['q']}" if value["q"] else REDACTED)
        pos = value.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _password_word(m: re.Match[str]) -> str:
    if m["value"].lower() in PROSE_AFTER_PASSWORD:
        return m[0]
    return f"{m['key']}{m['sep']}{REDACTED}"


def _mysql(m: re.Match[str]) -> str:
    return m[0][: m.start("args") - m.start()] + _MYSQL_P.sub(f"-p{REDACTED}", m["args"])


def _blocks(text: str) -> str:
    """`text` with every private-key block replaced (one scan: each BEGIN is searched from the last END)."""
    if "PRIVATE KEY" not in text:
        return text
    out: list[str] = []
    pos = 0
    while (begin := _BLOCK_BEGIN.search(text, pos)) is not None:
        end = _BLOCK_END.search(text, begin.end())
        out.append(text[pos : begin.end()])
        out.append(f" {REDACTED} ")
        if end is None:  # a cut block: everything after its header goes
            return "".join(out)
        out.append(end[0])
        pos = end.end()
    out.append(text[pos:])
    return "".join(out)


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in consecutive pieces of at most `size` characters that end at a line end (a line longer
    than `size` is one piece)."""
    start, n = 0, len(text)
    while start < n:
        if n - start <= size:
            yield text[start:]
            return
        cut = text.rfind("\n", start, start + size)
        if cut < 0:
            cut = text.find("\n", start + size)
            if cut < 0:
                yield text[start:]
                return
        yield text[start : cut + 1]
        start = cut + 1


def _redact_piece(text: str) -> str:
    """Each rule runs only when the text holds the literal it needs (a substring test: a rule that cannot
    match costs no pass of the regex engine over the text)."""
    low = text.lower()
    if "://" in text:
        text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = _TOKENS.sub(_token, text)
    if "=" in text or ":" in text:
        text = _keyed(text, _KEY_SEP, _PAIR_VALUE)
    if "-" in text:
        text = _keyed(text, _FLAG_KEY, _FLAG_VALUE)
        if "-u" in text or "-U" in text:
            text = _USER_FLAG.sub(lambda m: f"{m['key']}{m['sep']}{m['q']}{m['user']}:{REDACTED}", text)
        if "sshpass" in text:
            text = _SSHPASS.sub(_keep_key, text)
    if "passw" in low or "passphrase" in low:
        text = _PASSWORD_WORD.sub(_password_word, text)
    if "mysql" in low or "mariadb" in low:
        text = _MYSQL.sub(_mysql, text)
    if "bearer" in low or "basic" in low:
        text = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)
    return text


def redact(text: str) -> str:
    """`text` with every secret-looking value replaced by `[REDACTED]`, in time linear in its length."""
    text = _blocks(text)
    if len(text) <= PIECE_CHARS:
        return _redact_piece(text)
    return "".join(_redact_piece(p) for p in pieces(text))


def redact_environment(text: str) -> str:
    """An environment dump with every value removed (names are kept: they help, values may not)."""
    return _ENV_LINE.sub(lambda m: m[0].split("=", 1)[0] + "=" + REDACTED, text)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with secrets removed: secret flags' values (`--token X`, `--pass X`,
    `--password=X`), `curl -u user:pw`'s password, MySQL's `-ppw`, `sshpass -p pw`, and inline secrets."""
    out: list[str] = []
    pending = ""  # "value": hide the next argument; "user": hide the password of the next `user:pw`
    program = argv[0].rsplit("/", 1)[-1] if argv else ""
    mysql = bool(_MYSQL_ARG0.match(program))
    sshpass = program == _SSHPASS_ARG0
    for arg in argv:
        if pending == "value":
            out.append(REDACTED)
        elif pending == "user" and ":" in arg and "://" not in arg:
            out.append(arg.split(":", 1)[0] + ":" + REDACTED)
        elif (mysql or sshpass) and arg.startswith("-p") and len(arg) > 2:
            out.append("-p" + REDACTED)
            sshpass = False
            continue
        else:
            out.append(redact(arg))
        if pending:
            pending = ""
        elif (_FLAG_ARG.match(arg) and _is_secret_key(arg)) or (sshpass and arg == "-p"):
            pending = "value"
            sshpass = False
        elif arg in _USER_FLAGS:
            pending = "user"
    return out
