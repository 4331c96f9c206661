"""Kernel lines as people paste them: undo what web pages, Markdown and tables did to them.

A line quoted on a forum, a wiki or a bug tracker reaches us changed: HTML entities
(`pid=&#39;&lt;unknown&gt;&#39;`), typographic quotes (`pid=‘<unknown>’`), Markdown escapes
(`name=python3\\_worker`, `\\<unknown\\>`), no-break spaces, and a table's cell borders after the
text (`... GPU-cd57429b-... | |`). `repair` undoes these before the recognisers read a line (the
record keeps the line as it was written, in `raw`). A line with none of them is returned as is
after one search.

Pages also join lines: a rendered log whose newlines were lost holds several kernel messages in
one line (`... 00000100 May 6 00:40:41 alex kernel: [ 5044.302290] NVRM: Xid (...): 13, ...`).
`split_messages` cuts such a line before each driver message, at the time stamp that precedes it,
so that each message is read on its own.
"""

from __future__ import annotations

import re
from itertools import pairwise

# Anything `repair` changes: an HTML entity, a backslash, typographic quotes, a no-break space, a
# trailing `|` (a table cell border).
_SUSPECT = re.compile(
    r"&(?:lt|gt|amp|quot|apos|nbsp|#39|#x27|#34);|\\|[\u2018\u2019\u201a\u201b\u201c\u201d\u00a0\u2007\u202f]|\|\s*$"
)
# The entities pages write for the punctuation of a log line (never digits or letters: a number
# is read only where it is written in digits).
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&apos;": "'", "&nbsp;": " ", "&#39;": "'",
             "&#x27;": "'", "&#34;": '"'}
_ENTITY = re.compile("|".join(_ENTITIES))
_QUOTES = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u201c": '"', "\u201d": '"',
    "\u00a0": " ", "\u2007": " ", "\u202f": " ",
})
# Markdown escapes a backslash puts before punctuation (`\_`, `\<`, `\*`, `\[`).
_MD_ESCAPE = re.compile(r"\\([_<>*\[\]()#`|~-])")
# Table borders after the text: ` |`, ` | |`, `|`.
_TABLE_TAIL = re.compile(r"(?:\s*\|)+\s*$")

# Where a joined line's next message starts: the time stamp in front of `NVRM:` (raw dmesg, dmesg
# -T, syslog and ISO forms), searched in the text between two `NVRM:` anchors.
_STAMP = re.compile(
    r"\[\s*[0-9]{1,10}\.[0-9]{1,9}\]"
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} {1,2}[0-9]{1,2} [0-9:]{8} [0-9]{4}\]"
    r"|(?<![\w.])(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"|(?<![0-9])[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
)
NVRM_ANCHOR = "NVRM:"
MAX_MESSAGES_PER_LINE = 64  # a joined line is cut into at most this many messages (the last keeps the rest)


def repair(line: str) -> str:
    """The line with HTML entities, typographic quotes, Markdown escapes and table borders undone."""
    if line.isascii() and "&" not in line and "\\" not in line and "|" not in line:
        return line  # the common case, in four scans that run in C
    if _SUSPECT.search(line) is None:
        return line
    text = _ENTITY.sub(lambda m: _ENTITIES[m[0]], line) if "&" in line else line
    text = text.translate(_QUOTES)
    if "\\" in text:
        text = _MD_ESCAPE.sub(r"\1", text)
    if text.rstrip().endswith("|"):
        text = _TABLE_TAIL.sub("", text)
    return text


def split_messages(line: str) -> list[str]:
    """The driver messages of a line whose newlines were lost, each with the prefix in front of it;
    `[line]` for a line that holds one (or whose later `NVRM:` has no time stamp before it)."""
    first = line.find(NVRM_ANCHOR)
    starts: list[int] = []
    prev = first
    while len(starts) < MAX_MESSAGES_PER_LINE - 1:
        nxt = line.find(NVRM_ANCHOR, prev + len(NVRM_ANCHOR))
        if nxt < 0:
            break
        stamp = _STAMP.search(line, prev + len(NVRM_ANCHOR), nxt)
        if stamp is not None:
            starts.append(stamp.start())
        prev = nxt
    if not starts:
        return [line]
    bounds = [0, *starts, len(line)]
    return [line[a:b].rstrip() for a, b in pairwise(bounds) if line[a:b].strip()]
