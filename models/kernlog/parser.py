"""The kernel-log fault parser: lines in, `FaultRecord`s out.

`KernelLogParser` is a streaming state machine: feed it lines one at a time, and it returns the
records that are complete. Multi-line messages (the driver's notices about one GPU, an identity
line followed by its serial number, AER error groups, SXid detail lines, the crash-dump notice,
`/dev/kmsg` continuation lines) become one record spanning `line`..`line_end`; an open record never
takes a line that starts a record of its own. A record that a truncated input leaves incomplete is
dropped rather than guessed. Lines as web pages render them are repaired first
(`models.kernlog.mangled`), and a line holding several messages is read one message at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from models.catalog import Catalog, load_catalog
from models.kernlog.aer_reports import AerReports, OpenRecord, extend
from models.kernlog.clock import time_in_range
from models.kernlog.driver_lines import BODY, BODY_CLASSES, BODY_XIDS, TEXT_CONTINUED
from models.kernlog.limits import (
    KMSG_SEQ_MAX,
    MAX_CACHED_CHARS,
    MAX_LINE_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_PREFIX_CHARS,
    TRUNCATED_MARK,
    UPTIME_MAX_S,
    valid_uptime,
)
from models.kernlog.mangled import repair, split_messages
from models.kernlog.messages import (
    CRASH_DUMP_TAIL,
    NVRM,
    SERIAL,
    Match,
    OutOfRange,
    checked_pci,
    recognise,
    serial_fields,
)
from models.kernlog.notices import continues as notice_continues
from models.kernlog.notices import settle as settle_notice
from models.kernlog.origin import journal_entry_origin, message_start, prefix_origin
from models.kernlog.prefix import Prefix, line_source, parse_prefix
from models.kernlog.record import FaultRecord
from models.kernlog.shipper import Shipped, shipped
from models.vocabulary import Category

# Every line that starts a record carries one of these (NVRM: the driver's messages; SXid: NVSwitch
# errors; "rror": every line that can open a PCIe AER report, `AER: ... error received`,
# `PCIe Bus Error: ...`, `device [..] error status/mask=...`); continuation lines are read while a
# record is open. Other lines cost one substring test and two single-character tests ("V" and "X"
# go before "NVRM" and "SXid": a one-character search is a memchr, several times cheaper than a
# substring search, and most lines hold neither), which keeps the parser near the speed of reading
# the file. `feed()` and `parse()` spell the tests out for speed.
ANCHORS = ("NVRM", "SXid", "rror")
# In journal JSON, '"MESSAGE":[' marks an entry whose message is a byte array.
JSON_ANCHOR = '"MESSAGE":['

_MESSAGE_CACHE_SIZE = 4096  # distinct message texts remembered (storms repeat one text thousands of times)
_MISSING: Any = object()
_GROUP_GAP = 8  # lines of unrelated text after which an open multi-line record is closed
# Driver-error classes that are the words of a GPU notice (`models.kernlog.notices`): inside an
# open notice their lines carry it on.
NOTICE_CLASSES = frozenset({"legacy_gpu", "gpu_not_supported"})


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """`year` completes yearless syslog timestamps; None means the year of `now`."""

    year: int | None = None
    now: datetime | None = None


class KernelLogParser(AerReports):
    def __init__(self, options: ParseOptions | None = None, catalog: Catalog | None = None) -> None:
        self.options = options or ParseOptions()
        self.catalog = catalog or load_catalog()
        self._now = self.options.now or datetime.now(UTC)
        self._open: OpenRecord | None = None
        self._known_gpus: set[str] = set()
        self._gpu_root_ports: set[str] = set()
        self._other_devices: set[str] = set()
        self._lineno = 0
        self._message_cache: dict[str, Match | None] = {}
        self._prefix_cache: dict[str, Prefix] = {}
        self._kernel_prefix: dict[str, bool] = {}
        self._correctable: dict[str, int] = {}
        # What became of the driver's lines that are no record of their own: `joined` (a body line
        # added to its record), `benign` (a documented banner), `unclassified` (error-looking lines
        # no class names; each is also a record), `orphan_body` (a body line with no record open),
        # `other` (informational lines). And lines that are no record at all: `rejected` (a number
        # or address out of range), `overlong` (longer than MAX_LINE_CHARS, or cut by a reader),
        # `foreign` (written by user space: a syslog tag other than `kernel`, a user facility, a journal
        # entry of another transport; `models.kernlog.origin`).
        self.stats: dict[str, int] = dict.fromkeys(
            ("joined", "benign", "unclassified", "orphan_body", "other", "rejected", "overlong", "foreign"), 0)

    # -- public API -------------------------------------------------------------------------

    def feed(self, line: str, lineno: int | None = None) -> list[FaultRecord]:
        """Consume one input line (without or with its newline); return records now complete."""
        self._lineno = n = lineno if lineno is not None else self._lineno + 1
        opened = self._open
        anchored = ("V" in line and "NVRM" in line) or ("X" in line and "SXid" in line) or "rror" in line
        if opened is None and not anchored and line[:1] != "{":
            return []
        line = line.rstrip("\r\n")
        if (len(line) > MAX_MESSAGE_CHARS and (len(line) > MAX_LINE_CHARS or line[:1] != "{")) or line.endswith(
            TRUNCATED_MARK
        ):
            self.stats["overlong"] += 1  # no kernel message (or a piece of a cut line): unrelated text
            line, anchored = "", False
        if opened is not None:
            if opened.kmsg and line[:1] == " " and "=" in line:
                self._kmsg_continuation(opened, line, n)
                return []
            if (
                opened.expects == "aer"
                and ((opened.record.pci or "@") in line or (opened.record.source_pci or "@") in line)
                and self._aer_continuation(opened, line, n)
            ):
                return []
            if opened.expects == "aer" and ("recover" in line or "AER-aware" in line or "reset" in line
                                            or "broadcast" in line) and self._aer_recovery(
                opened, line, n
            ):
                return []
        if not anchored:
            if line[:1] == "{" and JSON_ANCHOR in line:
                return self._json_line(line, n)
            if opened is not None and n - opened.record.line_end > _GROUP_GAP:
                return self._close()
            return []
        if line[:1] == "{":
            return self._json_line(line, n)
        if line.find("NVRM:", line.find("NVRM:") + 5) > 0:  # a pasted log whose newlines were lost
            out: list[FaultRecord] = []
            for piece in split_messages(line):
                out.extend(self._text_line(piece, n, None))
            return out
        return self._text_line(line, n, None)

    def finish(self) -> list[FaultRecord]:
        """End of input: return the last complete record, if any."""
        return self._close()

    def parse(self, lines: Iterable[str]) -> Iterator[FaultRecord]:
        """Parse an iterable of lines: for text or journal JSON throughout, the same records as
        `feed()` on every line, then `finish()`.

        A line that carries none of the anchors (and continues no open record) costs three
        substring tests. Journal JSON input (first line starts with `{`) is fed line by line, since
        a message stored as a byte array carries no anchor in its text.
        """
        feed = self.feed
        n = self._lineno
        it = iter(lines)
        first = next(it, None)
        if first is not None:
            n += 1
            yield from feed(first, n)
            if first[:1] == "{":
                for line in it:
                    n += 1
                    out = feed(line, n)
                    if out:
                        yield from out
            else:
                opened = self._open is not None
                for line in it:
                    n += 1
                    if opened or ("V" in line and "NVRM" in line) or ("X" in line and "SXid" in line) or "rror" in line:
                        out = feed(line, n)
                        opened = self._open is not None
                        if out:
                            yield from out
        self._lineno = n
        yield from self.finish()

    # -- line handling ----------------------------------------------------------------------

    def _json_line(self, line: str, n: int) -> list[FaultRecord]:
        try:
            entry = json.loads(line)
        except RecursionError:  # nesting deeper than the interpreter's limit: no journal entry
            self.stats["rejected"] += 1
            return []
        except ValueError:
            if len(line) > MAX_MESSAGE_CHARS:
                self.stats["overlong"] += 1
                return []
            return self._text_line(line, n, None)
        if not isinstance(entry, dict):
            return []
        if "MESSAGE" not in entry and (ship := shipped(entry)) is not None:
            return self._shipped_line(ship, line, n)
        if not journal_entry_origin(entry).kernel:
            self.stats["foreign"] += 1
            return []
        message = entry.get("MESSAGE")
        if isinstance(message, list):
            try:
                message = bytes(int(b) & 0xFF for b in message).decode("utf-8", "replace")
            except (TypeError, ValueError):
                return []
        if not isinstance(message, str):
            return []
        prefix = Prefix(
            timestamp=_epoch_us(entry.get("__REALTIME_TIMESTAMP")),
            uptime_s=_us(entry.get("_SOURCE_MONOTONIC_TIMESTAMP")),
            host=entry.get("_HOSTNAME") if isinstance(entry.get("_HOSTNAME"), str) else None,
            format="journal-json",
        )
        if not _prefix_in_range(prefix):
            self.stats["rejected"] += 1
            return []
        out: list[FaultRecord] = []
        for part in message.splitlines() or [""]:
            if len(part) > MAX_MESSAGE_CHARS:
                self.stats["overlong"] += 1
                continue
            out.extend(self._text_line(part, n, prefix, raw=line))
        return out

    def _shipped_line(self, ship: Shipped, line: str, n: int) -> list[FaultRecord]:
        """A shipper's JSON line (`models.kernlog.shipper`): its message read as a text line, the
        shipper's host and time filling what the message's own header leaves out."""
        if ship.foreign_tag is not None:
            self.stats["foreign"] += 1
            return []
        at = datetime.fromisoformat(ship.timestamp) if ship.timestamp else None
        fill = Prefix(timestamp=ship.timestamp if at is not None and time_in_range(at) else None, host=ship.host)
        out: list[FaultRecord] = []
        for part in ship.message.splitlines():
            if len(part) > MAX_MESSAGE_CHARS:
                self.stats["overlong"] += 1
                continue
            out.extend(self._text_line(part, n, None, raw=line, fill=fill))
        return out

    def _text_line(self, line: str, n: int, given: Prefix | None, raw: str | None = None,
                   fill: Prefix | None = None) -> list[FaultRecord]:
        """One kernel message line; `given`: the prefix fields when the caller read them (journal);
        `raw`: the line as written when `line` is a piece of it; `fill`: the host and time to use where
        the line's own header names none (a log shipper's)."""
        if given is None and not self._from_kernel(line):
            return []
        if raw is None:
            raw = line
        line = repair(line)
        opened = self._open
        if opened is not None and opened.expects == "crash_dump" and CRASH_DUMP_TAIL.search(line):
            m = NVRM.search(line)
            extend(opened, raw, n, m["text"].strip() if m else line)
            return []
        if opened is not None and opened.expects == "serial" and SERIAL.search(line):
            s = SERIAL.search(line)
            if s:
                serial, state = serial_fields(s["serial"])
                opened.record.serial = serial
                opened.record.details.update(state)
                opened.expects = None
                extend(opened, raw, n, None)
            return []
        start = line.find("NVRM: ")
        if start < 0:
            start = line.find("nvidia-nvswitch")
        if start >= 0:
            # Driver messages repeat verbatim in storms: recognise each distinct text once.
            key = line[start:]
            cache = self._message_cache
            match = cache.get(key, _MISSING)
            if match is _MISSING:
                match = recognise(key)
                if match is not None:
                    self._enrich(match)
                if len(key) <= MAX_CACHED_CHARS:
                    if len(cache) >= _MESSAGE_CACHE_SIZE:
                        cache.clear()
                    cache[key] = match
        else:
            match = recognise(line)
            if match is None:
                return []
            start = match.start
            self._enrich(match)
        if match is None:
            return []
        if match.kind == "rejected":
            self.stats["rejected"] += 1
            return []
        if opened is not None and opened.expects == "notice" and self._notice_line(opened, match, raw, n):
            return []
        if match.kind[:5] == "nvrm_" or match.kind == "driver_error":
            if opened is not None and self._driver_body(opened, match, raw, n):
                return []
            if match.kind[:5] == "nvrm_":
                self._count_line(match.kind)
                return []
            if match.details.get("error") == "unclassified":
                self.stats["unclassified"] += 1
        if match.kind == "device_line":
            self._note_device(match)
            return []
        if opened is not None and match.kind == "sxid" and opened.expects == "sxid" and self._sxid_detail(
            opened, match, raw, n
        ):
            return []
        prefix = self._prefix(line[:start]) if given is None else given
        if prefix is None:  # a time out of range
            self.stats["rejected"] += 1
            return []
        if fill is not None:
            prefix = prefix._replace(timestamp=prefix.timestamp or fill.timestamp, host=prefix.host or fill.host)
        if match.kind in ("pcie_aer", "device_line"):
            self._note_device(match)  # before the open report closes: it may name that report's source
        out = self._close()
        record = self._record(match, prefix, raw, n)
        expects = match.expects or ("sxid" if match.kind == "sxid" else None)
        kmsg = prefix.format == "kmsg"
        complete = True
        if expects == "notice":
            complete = self._settle_notice(record)
        if expects is None and not kmsg:
            out.append(record)  # nothing can continue it: complete now
            return out
        self._open = OpenRecord(record, expects=expects, kmsg=kmsg, complete=complete,
                           driver=match.driver, function=match.function)
        return out

    def _notice_line(self, opened: OpenRecord, match: Match, raw: str, n: int) -> bool:
        """A line that carries on an open notice joins it: one with no record of its own (a line
        that starts one closes the notice instead), within a few lines of it."""
        kind = match.kind
        carries = kind in ("nvrm_other", "nvrm_body") or (
            kind == "driver_error" and match.details.get("error") in NOTICE_CLASSES) or (
            kind == "gpu_fallen_off_bus" and match.pci is None)
        if not carries or n - opened.record.line_end > 3 or not notice_continues(match.message):
            return False
        extend(opened, raw, n, match.message)
        self._settle_notice(opened.record)
        opened.complete = opened.record.kind != "gpu_notice"
        return True

    def _settle_notice(self, rec: FaultRecord) -> bool:
        """Give a notice its kind once its text says what it is; whether it does."""
        settled = settle_notice(rec.message)
        if settled is None:
            return False
        kind, details = settled
        if kind != rec.kind:
            rec.kind = kind
            if kind == "gpu_fallen_off_bus":
                rec.category = "hardware"
                info = self.catalog.xids.get(79)
                rec.immediate_action = info.immediate_action if info else None
            else:
                rec.category = "driver"
        rec.details.update(details)
        if rec.pci:
            self._known_gpus.add(rec.pci)
        return True

    def _from_kernel(self, line: str) -> bool:
        """False (and counted) when the line's header names a writer other than the kernel: a syslog
        tag other than `kernel`, a facility other than kern (`models.kernlog.origin`). Raw `dmesg`
        lines (`[` first) name none. Judged once per distinct header."""
        if line[:1] == "[":
            return True
        start = message_start(line)
        ptext = line[:start]
        kernel = self._kernel_prefix.get(ptext)
        if kernel is None:
            kernel = prefix_origin(line_source(ptext)).kernel
            if start < len(line) and len(ptext) <= MAX_CACHED_CHARS:  # a message's header repeats; a head does not
                if len(self._kernel_prefix) >= _MESSAGE_CACHE_SIZE:
                    self._kernel_prefix.clear()
                self._kernel_prefix[ptext] = kernel
        if not kernel:
            self.stats["foreign"] += 1
        return kernel

    def _prefix(self, ptext: str) -> Prefix | None:
        """The prefix fields of the text in front of a message (none when it is implausibly long);
        None when a number in it is out of range."""
        prefix = self._prefix_cache.get(ptext)
        if prefix is None:
            if len(ptext) > MAX_PREFIX_CHARS:
                return Prefix()
            prefix = parse_prefix(ptext, self.options.year, self._now)
            if not _prefix_in_range(prefix):
                return None
            if prefix.uptime_s is None:  # wall-clock prefixes repeat within a second; uptimes do not
                if len(self._prefix_cache) >= _MESSAGE_CACHE_SIZE:
                    self._prefix_cache.clear()
                self._prefix_cache[ptext] = prefix
        return prefix

    # -- assembly ---------------------------------------------------------------------------

    def _record(self, match: Match, prefix: Prefix, raw: str, n: int) -> FaultRecord:
        # Positional, in FaultRecord's field order (a storm creates thousands per second).
        rec = FaultRecord(
            n, match.kind, raw, match.message, n, prefix.timestamp, prefix.uptime_s, prefix.host, match.pci,
            match.source_pci, match.xid, match.sxid, match.pid, match.process, match.gpu_uuid, match.serial,
            match.mnemonic, match.immediate_action, match.category, self.catalog.version, prefix.format,
            dict(match.details),
        )
        if prefix.kmsg_seq is not None:
            rec.details["kmsg_seq"] = prefix.kmsg_seq
        if rec.kind in ("xid", "gpu_identity", "gpu_fallen_off_bus", "ecc", "driver_error") and rec.pci:
            self._known_gpus.add(rec.pci)
        if match.driver == "nvidia" and rec.pci:
            self._known_gpus.add(rec.pci)
        return rec

    def _enrich(self, match: Match) -> Match:
        """Catalog fields for a match (computed once per distinct message text)."""
        cat = self.catalog
        kind = match.kind
        if kind == "xid" and match.xid is not None:
            info = cat.xids.get(match.xid)
            if info:
                match.mnemonic = info.mnemonic
                match.immediate_action = info.immediate_action
                match.category = info.category
                match.details["description"] = info.description
                if info.investigatory_action:
                    match.details["investigatory_action"] = info.investigatory_action
            else:
                match.category = Category.UNKNOWN
        elif kind == "sxid" and match.sxid is not None:
            sinfo = cat.sxids.get(match.sxid)
            match.category = Category.INTERCONNECT
            if sinfo:
                match.mnemonic = sinfo.name
                match.details.setdefault("fatal", sinfo.fatal)
        elif kind in ("gpu_fallen_off_bus", "ecc", "pcie_aer"):
            match.category = Category.HARDWARE
            if kind == "gpu_fallen_off_bus":
                info = cat.xids.get(79)
                match.immediate_action = info.immediate_action if info else None
        elif kind == "driver_error":
            hardware = match.details.get("error") in ("gpu_lost", "reset_required")
            match.category = Category.HARDWARE if hardware else Category.DRIVER
        return match

    def _kmsg_continuation(self, opened: OpenRecord, line: str, n: int) -> None:
        rec = opened.record
        rec.raw = f"{rec.raw}\n{line}"
        rec.line_end = n
        key, _, value = line.strip().partition("=")
        rec.details.setdefault("kmsg_dict", {})[key] = value
        if key == "DEVICE" and value.startswith("+pci:") and rec.pci is None:
            try:
                rec.pci = checked_pci(value[5:])
            except OutOfRange:
                self.stats["rejected"] += 1

    def _sxid_detail(self, opened: OpenRecord, match: Match, raw: str, n: int) -> bool:
        rec = opened.record
        if rec.pci != match.pci or rec.sxid != match.sxid:
            return False
        msg = match.message
        if not (msg.startswith("Severity") or msg.startswith("Data")):
            return False
        if msg.startswith("Severity"):
            rec.details["detail"] = msg
        else:
            rec.details["data"] = msg
        extend(opened, raw, n, None)
        return True

    def _driver_body(self, opened: OpenRecord, match: Match, raw: str, n: int) -> bool:
        """Join a driver line to the open record it belongs to (verbatim), if it belongs to one."""
        rec = opened.record
        if n - rec.line_end > _GROUP_GAP or rec.kind not in ("xid", "driver_error"):
            return False
        error = rec.details.get("error") if rec.kind == "driver_error" else None
        takes_body = rec.xid in BODY_XIDS if rec.kind == "xid" else error in BODY_CLASSES
        kind = match.kind
        if kind == "nvrm_body" or (kind == "driver_error" and BODY.match(match.message)):
            joins = takes_body
        elif kind == "driver_error":
            # One function's multi-line dump (a core dump, a repeated heartbeat report) is one record.
            joins = error == match.details.get("error") and (
                (match.function is not None and match.function == opened.function) or error in TEXT_CONTINUED
            )
        else:
            joins = kind == "nvrm_other" and error in TEXT_CONTINUED and n - rec.line_end <= 4
        if not joins:
            return False
        if rec.pci is None and match.pci is not None:
            rec.pci = match.pci
        extend(opened, raw, n, match.message if error in TEXT_CONTINUED else None)
        rec.details["body_lines"] = rec.details.get("body_lines", 0) + 1
        self.stats["joined"] += 1
        return True

    def _count_line(self, kind: str) -> None:
        key = {"nvrm_benign": "benign", "nvrm_body": "orphan_body"}.get(kind, "other")
        self.stats[key] += 1

    def _close(self) -> list[FaultRecord]:
        opened, self._open = self._open, None
        if opened is None or not opened.complete:
            return []
        rec = opened.record
        if rec.kind == "pcie_aer" and not self._close_aer(opened):
            return []
        return [rec]


def parse_lines(lines: Iterable[str], options: ParseOptions | None = None) -> Iterator[FaultRecord]:
    """Parse an iterable of lines into records."""
    return KernelLogParser(options).parse(lines)


def _prefix_in_range(prefix: Prefix) -> bool:
    up, seq = prefix.uptime_s, prefix.kmsg_seq
    return (up is None or valid_uptime(up)) and (seq is None or seq <= KMSG_SEQ_MAX)


def _int_field(value: Any) -> int | None:
    """A journal field of ASCII digits (journald writes numbers as strings), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit():
        return int(value)
    return None


def _us(value: Any) -> float | None:
    """Microseconds as seconds; a value past UPTIME_MAX_S reads as one (the record is rejected)."""
    us = _int_field(value)
    if us is None:
        return None
    return us / 1_000_000 if us >= 0 else UPTIME_MAX_S + 1.0


def _epoch_us(value: Any) -> str | None:
    us = _int_field(value)
    try:
        at = datetime.fromtimestamp(us / 1_000_000, UTC) if us is not None else None
    except (ValueError, OverflowError, OSError):
        return None
    return at.isoformat() if at is not None and time_in_range(at) else None
