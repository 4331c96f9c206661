"""The kernel-log fault parser: lines in, `FaultRecord`s out.

`KernelLogParser` is a streaming state machine: feed it lines one at a time, and it returns the
records that are complete. Multi-line messages (the three-line "fallen off the bus", an identity
line followed by its serial number, AER error groups, SXid detail lines, the crash-dump notice,
`/dev/kmsg` continuation lines) become one record spanning `line`..`line_end`. A record that a
truncated input leaves incomplete is dropped rather than guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from models.catalog import Catalog, load_catalog
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
from models.kernlog.messages import (
    AER_RECOVERY,
    CORRECTABLE_NAMES,
    CRASH_DUMP_TAIL,
    NVRM,
    SERIAL,
    Match,
    OutOfRange,
    aer_continuation,
    checked_pci,
    recognise,
)
from models.kernlog.origin import journal_entry_origin, message_start, prefix_origin
from models.kernlog.prefix import Prefix, line_source, parse_prefix
from models.kernlog.record import FaultRecord

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
NVIDIA_VENDOR = "10de"


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """`year` completes yearless syslog timestamps; None means the year of `now`."""

    year: int | None = None
    now: datetime | None = None


class _Open:
    """A record still accepting continuation lines."""

    __slots__ = ("complete", "driver", "expects", "function", "kmsg", "record")

    def __init__(self, record: FaultRecord, expects: str | None, kmsg: bool, complete: bool,
                 driver: str | None, function: str | None = None) -> None:
        self.record = record
        self.expects = expects
        self.kmsg = kmsg
        self.complete = complete
        self.driver = driver
        self.function = function


class KernelLogParser:
    def __init__(self, options: ParseOptions | None = None, catalog: Catalog | None = None) -> None:
        self.options = options or ParseOptions()
        self.catalog = catalog or load_catalog()
        self._now = self.options.now or datetime.now(UTC)
        self._open: _Open | None = None
        self._known_gpus: set[str] = set()
        self._gpu_root_ports: set[str] = set()
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
            if opened.expects == "aer" and ("recover" in line or "AER-aware" in line) and self._aer_recovery(
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

    def _text_line(self, line: str, n: int, given: Prefix | None, raw: str | None = None) -> list[FaultRecord]:
        """One kernel message line; `given`: the prefix fields when the caller read them (journal)."""
        if given is None and not self._from_kernel(line):
            return []
        opened = self._open
        if opened is not None and not opened.complete and opened.expects == "fallen" and "NVRM" in line:
            m = NVRM.search(line)
            if m and n - opened.record.line_end <= 3:
                self._extend(opened, raw or line, n, m["text"].strip())
                if "fallen off the bus" in line:
                    opened.complete = True
                    opened.expects = None
                return []
        if opened is not None and opened.expects == "crash_dump" and CRASH_DUMP_TAIL.search(line):
            m = NVRM.search(line)
            self._extend(opened, raw or line, n, m["text"].strip() if m else line)
            return []
        if opened is not None and opened.expects == "serial" and SERIAL.search(line):
            s = SERIAL.search(line)
            if s:
                opened.record.serial = s["serial"]
                opened.expects = None
                self._extend(opened, raw or line, n, None)
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
        if match.kind[:5] == "nvrm_" or match.kind == "driver_error":
            if opened is not None and self._driver_body(opened, match, raw or line, n):
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
            opened, match, raw or line, n
        ):
            return []
        prefix = self._prefix(line[:start]) if given is None else given
        if prefix is None:  # a time out of range
            self.stats["rejected"] += 1
            return []
        out = self._close()
        record = self._record(match, prefix, raw or line, n)
        expects = match.expects or ("sxid" if match.kind == "sxid" else None)
        kmsg = prefix.format == "kmsg"
        if expects is None and not kmsg:
            out.append(record)  # nothing can continue it: complete now
            return out
        self._open = _Open(record, expects=expects, kmsg=kmsg, complete=match.expects != "fallen",
                           driver=match.driver, function=match.function)
        return out

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
                match.category = "unknown"
        elif kind == "sxid" and match.sxid is not None:
            sinfo = cat.sxids.get(match.sxid)
            match.category = "interconnect"
            if sinfo:
                match.mnemonic = sinfo.name
                match.details.setdefault("fatal", sinfo.fatal)
        elif kind in ("gpu_fallen_off_bus", "ecc", "pcie_aer"):
            match.category = "hardware"
            if kind == "gpu_fallen_off_bus":
                info = cat.xids.get(79)
                match.immediate_action = info.immediate_action if info else None
        elif kind == "driver_error":
            match.category = "hardware" if match.details.get("error") in ("gpu_lost", "reset_required") else "driver"
        return match

    def _extend(self, opened: _Open, raw: str, n: int, text: str | None) -> None:
        rec = opened.record
        if rec.raw != raw:
            rec.raw = f"{rec.raw}\n{raw}"
        rec.line_end = n
        if text:
            rec.message = f"{rec.message} {text}".strip()

    def _kmsg_continuation(self, opened: _Open, line: str, n: int) -> None:
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

    def _aer_continuation(self, opened: _Open, line: str, n: int) -> bool:
        if not self._from_kernel(line):
            return False
        match = recognise(line)
        if match is None or match.kind not in ("device_line", "pcie_aer") or match.pci not in (
            opened.record.pci,
            opened.record.source_pci,
        ):
            return False
        if match.kind == "pcie_aer" and match.source_pci != match.pci:
            return False  # a new "error received" report starts a new record
        fields = aer_continuation(match.message if match.kind == "device_line" else line)
        if fields is None:
            return False
        rec = opened.record
        if match.kind == "pcie_aer" and "error_type" in rec.details and "error_type" in match.details:
            return False  # a second error header: a new error
        if match.driver == "nvidia" and match.pci:
            self._known_gpus.add(match.pci)
            opened.driver = opened.driver if opened.driver == "nvidia" else "nvidia"
        errors: list[str] = rec.details.setdefault("errors", [])
        if "error" in fields:
            errors.append(fields["error"])
        for key in ("error_type", "agent", "vendor_id", "device_id"):
            if key in fields:
                rec.details[key] = fields[key]
        if "severity" in fields and rec.details.get("severity") == "corrected":
            rec.details["severity"] = fields["severity"]
        self._extend(opened, line, n, None)
        return True

    def _aer_recovery(self, opened: _Open, line: str, n: int) -> bool:
        """A recovery line on a device below the reporting port joins the report; an NVIDIA device
        there makes the port a GPU's port (`details.affected` lists the GPUs named)."""
        if not self._from_kernel(line):
            return False
        match = recognise(line)
        if match is None or match.kind != "device_line" or not AER_RECOVERY.search(match.message):
            return False
        if match.driver == "nvidia" and match.pci:
            self._known_gpus.add(match.pci)
            opened.driver = "nvidia"
            affected: list[str] = opened.record.details.setdefault("affected", [])
            if match.pci not in affected:
                affected.append(match.pci)
        self._extend(opened, line, n, None)
        return True

    def _sxid_detail(self, opened: _Open, match: Match, raw: str, n: int) -> bool:
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
        self._extend(opened, raw, n, None)
        return True

    def _driver_body(self, opened: _Open, match: Match, raw: str, n: int) -> bool:
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
        self._extend(opened, raw, n, match.message if error in TEXT_CONTINUED else None)
        rec.details["body_lines"] = rec.details.get("body_lines", 0) + 1
        self.stats["joined"] += 1
        return True

    def _count_line(self, kind: str) -> None:
        key = {"nvrm_benign": "benign", "nvrm_body": "orphan_body"}.get(kind, "other")
        self.stats[key] += 1

    def _note_device(self, match: Match) -> None:
        if match.driver == "nvidia" and match.pci:
            self._known_gpus.add(match.pci)

    def _aer_is_gpu(self, opened: _Open) -> bool:
        rec = opened.record
        if opened.driver == "nvidia" or rec.details.get("vendor_id") == NVIDIA_VENDOR:
            return True
        devices = {rec.pci, rec.source_pci}
        if devices & self._known_gpus:
            return True
        return rec.pci in self._gpu_root_ports and rec.source_pci == rec.pci

    def _close(self) -> list[FaultRecord]:
        opened, self._open = self._open, None
        if opened is None or not opened.complete:
            return []
        rec = opened.record
        if rec.kind == "pcie_aer":
            if not self._aer_is_gpu(opened):
                return []
            if rec.pci and (rec.source_pci != rec.pci or rec.details.get("affected")):
                self._gpu_root_ports.add(rec.pci)
            self._aer_severity_and_count(rec)
        return [rec]


    def _aer_severity_and_count(self, rec: FaultRecord) -> None:
        """A header-less report's severity from its error names; the GPU's running count of
        correctable reports (a trend: a link that logs correctable errors for hours before it fails)."""
        errors = rec.details.get("errors")
        if rec.details.get("severity") == "unknown" and errors:
            rec.details["severity"] = "corrected" if all(e in CORRECTABLE_NAMES for e in errors) else "non-fatal"
        if not errors:
            rec.details.pop("errors", None)
        if rec.details.get("severity") == "corrected":
            device = rec.source_pci or rec.pci or ""
            count = self._correctable.get(device, 0) + 1
            self._correctable[device] = count
            rec.details["correctable_count"] = count


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
