"""Recognisers for the kernel messages the NVIDIA driver and the PCIe AER driver print.

Each recogniser finds its message anywhere in a line (so any prefix may stand in front of it) and
returns a `Match`: where the kernel message starts and the fields it carries. The parser adds the
prefix fields, merges multi-line messages and enriches from the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from models.catalog import RECOVERY_ACTIONS
from models.kernlog.driver_lines import (
    BODY,
    BODY_CLASSES,
    BODY_XIDS,
    class_details,
    driver_error_class,
    function_of,
    is_benign,
    looks_like_error,
    pci_in,
)
from models.kernlog.fields import read_name, read_pci, read_pid
from models.kernlog.limits import PCI_DEVICE_MAX, SXID_RANGE, XID_RANGE, in_range
from models.kernlog.notices import opener as notice_opener
from models.pci import BDF, normalize_pci

# pid=<n|'<unknown>'>[, name=<comm>][, <message>]; a comm may hold spaces (not commas).
# Quantifiers that something must follow are bounded, so that no line costs more than linear time
# (an unbounded `[^)]*` is re-scanned from every occurrence of its anchor); digits are ASCII.
# The code is read whatever follows it (a line cut after the code, a stray character, a field that
# does not read): the pid and name fields are optional, and the message is whatever is left.
XID = re.compile(
    r"NVRM: Xid\s{0,8}(?:\((?P<pci>[^)]{0,64})\)\s{0,4}:?|(?=\s))\s{0,8}(?P<xid>[0-9]+)(?!\d)"
    r"\s{0,8},?\s{0,8}(?:pid\s{0,4}=(?P<pid>[^,]{0,64})(?:,\s{0,8}name\s{0,4}=(?P<name>[^,]{0,256}))?(?:,|$))?"
    r"\s*(?P<msg>.*)$"
)
SXID = re.compile(
    r"(?P<switch>nvidia-nvswitch[0-9]{0,4}): SXid \((?P<pci>[^)]{0,64})\): (?P<sxid>[0-9]+)(?:,\s*(?P<rest>.*))?$"
)
# The identity line: `PCI:` in front of the address since r450, none before (`GPU at 0000:03:00:`).
IDENTITY = re.compile(r"NVRM: GPU at (?P<pci>(?:PCI:)?[0-9a-fA-Fx:.]{1,32}): (?P<uuid>\S{0,128})\s*$")
UUID = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# A UUID some of whose digits were masked (`GPU-2b7e9c4a-xxxx-...`): redacted, never a wrong UUID.
_MASKED_UUID = re.compile(r"[0-9a-fA-FxX*#?]{8}-[0-9a-fA-FxX*#?]{4}-[0-9a-fA-FxX*#?]{4}-[0-9a-fA-FxX*#?]{4}-"
                          r"[0-9a-fA-FxX*#?]{12}")
# The board serial: after the identity line, and after "fallen off the bus" in older drivers
# (`GPU is on Board 0324...`, `GPU is on Board .` when the board has none).
SERIAL = re.compile(r"NVRM: GPU (?:Board Serial Number:|is on Board)[ \t]{0,16}(?P<serial>[^\t]{0,64}?)\.?\s*$")
SERIAL_IS = re.compile(r"NVRM: GPU (?P<pci>" + BDF + r"): GPU serial number is[ \t]{0,16}(?P<serial>\S{0,64}?)\.?\s*$")
# Values people redact before posting a log, or the driver prints when it has none.
_REDACTED = re.compile(r"[xX*#?.\-_]+|<[^>]*>|\[[^\]]*\]|N/?A|none|unknown|redacted|0+", re.IGNORECASE | re.ASCII)
# The GPU a one-line "fallen off the bus" notice names (the words themselves are looked for after it).
FALLEN_ONE = re.compile(
    r"NVRM: GPU (?:at )?(?P<pci>(?:PCI:)?(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):?\s"
)
FALLEN_WORDS = "fallen off the bus"
NVRM = re.compile(r"NVRM:?[ \t](?P<text>.*)$")
_NVRM_GPU = re.compile(r"^GPU (?:at )?(?P<pci>(?:PCI:)?[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):")
DEVICE_LINE = re.compile(r"(?P<drv>[\w.-]{1,32}) (?P<bdf>" + BDF + r"): (?P<text>.*)$")
_AER_RECEIVED = re.compile(
    r"(?:AER: )?(?P<what>(?:Multiple )?(?:Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<sev>Non-Fatal|Fatal)\))? error(?: message)?) received"
    r"(?:(?::| from) (?P<src>" + BDF + r")|: id=(?P<rid>[0-9a-fA-F]{4}))"
)
# The agent `(Receiver ID)` may be missing: a header wrapped before it by a paste.
_AER_HEADER = re.compile(
    r"(?:AER: )?PCIe Bus Error: severity=(?P<sev>[^,]{1,32}), type=(?P<type>[^,]{1,64})"
    r"(?:, (?:id=[0-9a-fA-F]{4})?\((?P<agent>[^)]{0,64})\)|,?\s*$)"
)
_AER_DEVICE = re.compile(r"device \[(?P<vendor>[0-9a-fA-F]{4}):(?P<devid>[0-9a-fA-F]{4})\] error status/mask=")
_AER_ERRNAME = re.compile(
    r"^(?:AER:)?\s*\[\s{0,4}(?P<bit>[0-9]{1,2})\]\s+(?P<name>[A-Za-z][\w ]{0,80}?)\s*(?:\((?P<note>[^)]{0,64})\))?\s*$"
)
_AER_OTHER = re.compile(r"TLP Header:|Error of this Agent is reported first|AER: +aer_")
# What the AER driver prints while it recovers the devices below the reporting port: a line on a
# device (`nvidia 0000:02:00.0: device has no AER-aware driver`) names a device under that port.
AER_RECOVERY = re.compile(
    r"device has no AER-aware driver|can't recover \(no error_detected callback\)|broadcast error_detected message"
    r"|device recovery failed|link has been reset"
)

_GPC = re.compile(
    r"\(GPC (?P<gpc>[0-9]{1,4}), TPC (?P<tpc>[0-9]{1,4})(?:, SM (?P<sm>[0-9]{1,4}))?\)(?::\s*(?P<exc>[^.]{1,256}))?"
)
_MMU = re.compile(
    r"MMU Fault: ENGINE (?P<engine>\S{1,64}) (?P<client>\S{1,64}) faulted @ (?P<addr>0x[0-9a-fA-F_]{1,24})\.?"
    r"(?: Fault is of type (?P<ftype>\S{1,64})(?: (?P<access>\S{1,64}))?)?"
)
_RECOVERY = re.compile(
    r"GPU recovery action changed from (?P<old_code>0x[0-9a-fA-F]{1,8}) \((?P<old>[^)]{0,64})\) to "
    r"(?P<new_code>0x[0-9a-fA-F]{1,8})(?: \((?P<new>[^)]{0,64})\)?)?"
)
_LINKS = re.compile(r"\b[Ll]inks? (?P<ids>[0-9]{1,3}(?:\s{0,4}(?:,|and)\s{0,4}[0-9]{1,3}){0,63})")
_LINK_MASK = re.compile(r"\b[Ll]inks? (?:mask )?(?P<mask>0x[0-9a-fA-F]{1,16})\b")
_DIGITS = re.compile(r"[0-9]+")
_OTHER_DIGIT = re.compile(r"(?![0-9])\d")  # a decimal digit of another script (Arabic-Indic, full-width, ...)
_LINK = re.compile(r"\bLink ([0-9]{1,3})\b")
_CHANNEL = re.compile(r"\bCh (?P<ch>[0-9a-fA-F]{8})\b")

_ECC_WORDS = re.compile(
    r"\b(?:ECC|DBE|SBE|double[- ]bit|single[- ]bit|row remap\w*|remapped rows|row remapper|page retirement|"
    r"retired pages?)\b",
    re.IGNORECASE,
)
CRASH_DUMP_TAIL = re.compile(r"nvidia-bug-report\.sh|kernel module is unloaded")


@dataclass(slots=True)
class Match:
    kind: str
    start: int
    message: str
    pci: str | None = None
    source_pci: str | None = None
    xid: int | None = None
    sxid: int | None = None
    pid: int | None = None
    process: str | None = None
    gpu_uuid: str | None = None
    serial: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # Multi-line assembly: what the parser may still merge into this record.
    expects: str | None = None
    driver: str | None = None
    function: str | None = None
    # Catalog enrichment, filled in by the parser once per distinct message.
    mnemonic: str | None = None
    immediate_action: str | None = None
    category: str | None = None


def _xid_details(xid: int, msg: str) -> dict[str, Any]:
    d: dict[str, Any] = {}
    ch = _CHANNEL.search(msg) if "Ch " in msg else None
    if ch:
        d["channel"] = ch["ch"]
    g = _GPC.search(msg) if "GPC" in msg else None
    if g:
        d["gpc"] = int(g["gpc"])
        d["tpc"] = int(g["tpc"])
        if g["sm"] is not None:
            d["sm"] = int(g["sm"])
        if g["exc"]:
            d["exception"] = g["exc"].strip()
    mmu = _MMU.search(msg) if "MMU" in msg else None
    if mmu:
        d["mmu_engine"] = mmu["engine"]
        d["mmu_client"] = mmu["client"]
        d["fault_address"] = mmu["addr"]
        if mmu["ftype"]:
            d["fault_type"] = mmu["ftype"]
        if mmu["access"]:
            d["access_type"] = mmu["access"]
    rec = _RECOVERY.search(msg) if "recovery action" in msg else None
    if rec:
        d["recovery_action_old"] = rec["old"]
        d["recovery_action_new"] = (rec["new"] or "").strip()
        d["recovery_action_old_code"] = int(rec["old_code"], 16)
        d["recovery_action_new_code"] = new = int(rec["new_code"], 16)
        d["recovery_action"] = RECOVERY_ACTIONS.get(new, "unknown")  # NVML's name of the action now required
    if "ink" in msg or "INK" in msg:
        links = _LINKS.search(msg)
        if links:
            d["nvlink_links"] = [int(x) for x in _DIGITS.findall(links["ids"])]
        mask = _LINK_MASK.search(msg)
        if mask:
            bits = int(mask["mask"], 16)
            d["nvlink_links"] = [i for i in range(64) if bits >> i & 1]
    return d


class OutOfRange(ValueError):
    """A number or address in a line is outside its range: the line is not a record."""


def checked_pci(text: str | None) -> str | None:
    """`normalize_pci`, with the device number held to its 5 bits (`0000:3b:ff.0` is no device)."""
    pci = normalize_pci(text)
    if pci is not None and int(pci[-4:-2], 16) > PCI_DEVICE_MAX:
        raise OutOfRange(f"PCI device number in {text!r}")
    return pci


def _decimal(text: str, what: str) -> None:
    """The driver prints its numbers with `%d`: a leading zero (`079`) is no number it wrote."""
    if len(text) > 1 and text[0] == "0":
        raise OutOfRange(f"{what} with a leading zero")


def _match_xid(line: str) -> Match | None:
    m = XID.search(line)
    if not m:
        return None
    pci_text, code, raw_pid, name, msg = m.groups()
    _decimal(code, "Xid code")
    xid = int(code) if len(code) <= 4 else -1
    if not in_range(xid, XID_RANGE):
        raise OutOfRange("Xid code")
    invalid: dict[str, str] = {}
    pid, bad_pid = read_pid(raw_pid) if raw_pid is not None else (None, None)
    if bad_pid is not None:
        invalid["pid"] = bad_pid
    pci, bad_pci = read_pci(pci_text)
    if bad_pci is not None:
        invalid["pci"] = bad_pci
    msg = msg.strip() if msg else ""
    details = _xid_details(xid, msg) if msg else {}
    if invalid:
        details["invalid"] = invalid
    return Match(
        kind="xid",
        start=m.start(),
        message=msg,
        pci=pci,
        xid=xid,
        pid=pid,
        process=read_name(name) if name is not None else None,
        details=details,
        expects="body" if xid in BODY_XIDS else None,
    )


def _match_sxid(line: str) -> Match | None:
    m = SXID.search(line)
    if not m:
        return None
    rest = (m["rest"] or "").strip()
    d: dict[str, Any] = {"switch": m["switch"]}
    low = rest.lower()
    if low.startswith("non-fatal"):
        d["severity"] = "non-fatal"
    elif low.startswith("fatal"):
        d["severity"] = "fatal"
    links = _LINK.search(rest)
    if links:
        d["nvlink_links"] = [int(links[1])]
    _decimal(m["sxid"], "SXid code")
    sxid = int(m["sxid"]) if len(m["sxid"]) <= 6 else -1
    if not in_range(sxid, SXID_RANGE):
        raise OutOfRange("SXid code")
    return Match(kind="sxid", start=m.start(), message=rest, pci=checked_pci(m["pci"]), sxid=sxid, details=d)


def _match_device_line(line: str) -> Match | None:
    """AER lines and other `<driver> <bdf>: ...` lines."""
    m = DEVICE_LINE.search(line)
    if not m:
        return None
    drv, bdf, text = m["drv"], checked_pci(m["bdf"]), m["text"]
    rcv = _AER_RECEIVED.search(text)
    if rcv:
        return Match(kind="pcie_aer", start=m.start(), message=f"{drv} {bdf}: {text}", pci=bdf,
                     source_pci=checked_pci(rcv["src"]) if rcv["src"] else requester_pci(bdf, rcv["rid"]),
                     details={"severity": _severity(rcv["what"], rcv["sev"]), "errors": []},
                     expects="aer", driver=drv)
    hdr = _AER_HEADER.search(text)
    if hdr:
        return Match(kind="pcie_aer", start=m.start(), message=f"{drv} {bdf}: {text}", pci=bdf, source_pci=bdf,
                     details={"severity": _severity(hdr["sev"], None), "error_type": hdr["type"].strip(),
                              "agent": hdr["agent"], "errors": []},
                     expects="aer", driver=drv)
    dev = _AER_DEVICE.search(text) if "error status" in text else None
    if dev:  # a report whose header lines were rate-limited away
        return Match(kind="pcie_aer", start=m.start(), message=f"{drv} {bdf}: {text}", pci=bdf, source_pci=bdf,
                     details={"severity": "unknown", "vendor_id": dev["vendor"].lower(),
                              "device_id": dev["devid"].lower(), "errors": []},
                     expects="aer", driver=drv)
    return _nvidia_device_error(drv, bdf, text, m.start()) or Match(
        kind="device_line", start=m.start(), message=text, pci=bdf, driver=drv)


def requester_pci(port: str | None, rid: str | None) -> str | None:
    """The device an old-style `error received: id=00e5` names: bus 0x00, device 0x1c, function 5,
    in the reporting port's PCI domain."""
    if not rid or not port:
        return None
    value = int(rid, 16)
    return f"{port[:4]}:{value >> 8:02x}:{(value >> 3) & 0x1F:02x}.{value & 7}"


# AER error names (as the kernel spells them, old and new) that only a correctable error carries.
CORRECTABLE_NAMES = frozenset({
    "RxErr", "Receiver Error", "BadTLP", "Bad TLP", "BadDLLP", "Bad DLLP", "Rollover", "REPLAY_NUM Rollover",
    "RELAY_NUM Rollover",
    "Timeout", "Replay Timer Timeout", "NonFatalErr", "Advisory Non-Fatal", "CorrIntErr", "HeaderOF",
})


def _severity(what: str, sev: str | None) -> str:
    w = (what + " " + (sev or "")).lower()
    if "fatal" in w and "non-fatal" not in w:
        return "fatal"
    if "uncorrect" in w:
        return "non-fatal"
    return "corrected"


def aer_continuation(text: str) -> dict[str, Any] | None:
    """Fields of an AER detail line (`PCIe Bus Error`, `device [..] error status/mask=`, `[ n] Name`)."""
    hdr = _AER_HEADER.search(text)
    if hdr:
        return {"severity": _severity(hdr["sev"], None), "error_type": hdr["type"].strip(), "agent": hdr["agent"]}
    dev = _AER_DEVICE.search(text)
    if dev:
        return {"vendor_id": dev["vendor"].lower(), "device_id": dev["devid"].lower()}
    name = _AER_ERRNAME.match(text)
    if name:
        return {"error": name["name"].strip()}
    if _AER_OTHER.search(text) or AER_RECOVERY.search(text):
        return {}
    return None


def _value_state(value: str) -> str:
    """`ok`, `empty` or `redacted` (a placeholder such as `xxxx`, `N/A`, `<redacted>`)."""
    if not value:
        return "empty"
    if _REDACTED.fullmatch(value) or not any(c.isalnum() for c in value):
        return "redacted"
    return "ok"


def serial_fields(value: str) -> tuple[str | None, dict[str, Any]]:
    """The serial number a serial line gives, or None with `serial_state` and the text as printed."""
    state = _value_state(value)
    return (value, {}) if state == "ok" else (None, {"serial_state": state, "serial_text": value})


def _identity(line: str, text: str, start: int) -> Match | None:
    ident = IDENTITY.search(line)
    if ident:
        raw_uuid = ident["uuid"]
        uuid_ok = UUID.fullmatch(raw_uuid) is not None
        value = raw_uuid[4:] if raw_uuid[:4].upper() == "GPU-" else raw_uuid
        state = "ok" if uuid_ok else "redacted" if _MASKED_UUID.fullmatch(value) else _value_state(value)
        pci, bad_pci = read_pci(ident["pci"])
        details: dict[str, Any] = {} if uuid_ok else {"uuid_state": "malformed" if state == "ok" else state,
                                                      "uuid_text": raw_uuid}
        if bad_pci is not None:
            details["invalid"] = {"pci": bad_pci}
        return Match(kind="gpu_identity", start=start, message=text, pci=pci,
                     gpu_uuid="GPU-" + raw_uuid[4:].lower() if uuid_ok else None, expects="serial", details=details)
    ser = SERIAL.search(line) or SERIAL_IS.search(line)
    if ser:
        serial, details = serial_fields(ser["serial"])
        pci = checked_pci(ser["pci"]) if "pci" in ser.groupdict() else None
        return Match(kind="gpu_identity", start=start, message=text, pci=pci, serial=serial, details=details)
    return None


def _driver_line(text: str, raw_text: str, start: int) -> Match:
    """A named driver error, ECC report, body line, benign line or unclassified error."""
    if raw_text[:1].isspace():
        return Match(kind="nvrm_body", start=start, message=text)
    if is_benign(text):
        return Match(kind="nvrm_benign", start=start, message=text)
    gpu = _NVRM_GPU.match(text)
    name = driver_error_class(text)
    if name is not None:
        pci_text = gpu["pci"] if gpu else pci_in(text)
        return Match(kind="driver_error", start=start, message=text, pci=checked_pci(pci_text),
                     details={"error": name, **class_details(name, text)}, function=function_of(text),
                     expects="crash_dump" if name == "crash_dump" else "body" if name in BODY_CLASSES else None)
    if BODY.match(text):
        return Match(kind="nvrm_body", start=start, message=text)
    pci = checked_pci(gpu["pci"]) if gpu else None
    if _ECC_WORDS.search(text):
        return Match(kind="ecc", start=start, message=text, pci=pci)
    if looks_like_error(text):
        return Match(kind="driver_error", start=start, message=text, pci=pci or checked_pci(pci_in(text)),
                     details={"error": "unclassified"}, function=function_of(text))
    return Match(kind="nvrm_other", start=start, message=text)


def _match_nvrm(line: str) -> Match | None:
    """Every other NVRM message: identity, fallen off the bus, ECC, driver lines."""
    m = NVRM.search(line)
    if not m:
        return None
    raw_text = m["text"]
    text = raw_text.strip()
    start = m.start()
    if text[:3] == "Xid":  # an Xid line that does not read as one: never a fault of another kind
        if _OTHER_DIGIT.search(text):
            raise OutOfRange("digits other than ASCII in an Xid line")
        return _driver_line(text, raw_text, start)
    got = _identity(line, text, start)
    if got:
        return got
    if text[:10] == "The NVIDIA":
        fields = notice_opener(text)
        if fields is not None:  # a notice over several lines: the parser reads on (`models.kernlog.notices`)
            pci, bad_pci = read_pci(fields.pop("pci"))
            if bad_pci is not None:
                fields["invalid"] = {"pci": bad_pci}
            return Match(kind="gpu_notice", start=start, message=text, pci=pci, details=fields, expects="notice")
    if FALLEN_WORDS in text:
        fo = FALLEN_ONE.search(line)
        named = fo is not None and line.find(FALLEN_WORDS, fo.end()) >= 0
        pci, bad_pci = read_pci(fo["pci"]) if fo is not None and named else (None, None)
        return Match(kind="gpu_fallen_off_bus", start=start, message=text, pci=pci,
                     details={"invalid": {"pci": bad_pci}} if bad_pci else {})
    return _driver_line(text, raw_text, start)


def recognise(line: str) -> Match | None:
    """The first recogniser that finds its message in the line, or None; a line whose numbers are
    out of range is a `rejected` match (not-a-record)."""
    try:
        return _recognise(line)
    except OutOfRange as exc:
        return Match(kind="rejected", start=0, message=str(exc))


def _recognise(line: str) -> Match | None:
    if "NVRM" in line:
        if "Xid" in line:
            got = _match_xid(line)
            if got:
                return got
        got = _match_nvrm(line)
        if got:
            return got
    if "SXid" in line:
        got = _match_sxid(line)
        if got:
            return got
    if ":" in line:
        return _match_device_line(line) or _match_probe_failure(line)
    return None


# The kernel's own lines about the NVIDIA driver on a device: its probe failed, or the GSP firmware
# it loads was not found (`nvidia 0000:06:00.0: Direct firmware load for nvidia/550.76/gsp_ga10x.bin
# failed with error -2`). The driver did not come up on that GPU.
_PROBE_FAILED = re.compile(r"\bnvidia: probe of (?P<bdf>" + BDF + r") failed with error (?P<err>-?[0-9]{1,5})")
_FIRMWARE_FAILED = re.compile(
    r"(?:firmware load for |loading /lib/firmware/)\S{0,200} failed with error (?P<err>-?[0-9]{1,5})"
)


def _match_probe_failure(line: str) -> Match | None:
    m = _PROBE_FAILED.search(line) if "probe of" in line else None
    if m is None:
        return None
    return Match(kind="driver_error", start=m.start(), message=line[m.start():].strip(), pci=checked_pci(m["bdf"]),
                 details={"error": "probe_failed", "errno": int(m["err"])}, driver="nvidia")


def _nvidia_device_error(drv: str, bdf: str | None, text: str, start: int) -> Match | None:
    """A kernel line on a device the NVIDIA driver holds that says the driver could not start it."""
    fw = _FIRMWARE_FAILED.search(text) if drv == "nvidia" and "firmware" in text else None
    if fw is None:
        return None
    return Match(kind="driver_error", start=start, message=f"{drv} {bdf}: {text}", pci=bdf,
                 details={"error": "firmware_missing", "errno": int(fw["err"])}, driver=drv)
