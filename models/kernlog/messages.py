"""Recognisers for the kernel messages the NVIDIA driver and the PCIe AER driver print.

Each recogniser finds its message anywhere in a line (so any prefix may stand in front of it) and
returns a `Match`: where the kernel message starts and the fields it carries. The parser adds the
prefix fields, merges multi-line messages and enriches from the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from models.kernlog.driver_lines import (
    BODY,
    BODY_CLASSES,
    BODY_XIDS,
    driver_error_class,
    function_of,
    is_benign,
    looks_like_error,
    pci_in,
)
from models.pci import BDF, normalize_pci

# pid=<n|'<unknown>'>[, name=<comm>][, <message>]; a comm may hold spaces (not commas).
XID = re.compile(
    r"NVRM: Xid\s*\((?P<pci>[^)]*)\):\s*(?P<xid>\d+)(?:,\s*pid=(?P<pid>[^,]*)(?:,\s*name=(?P<name>[^,]*))?)?"
    r"(?:,\s*(?P<msg>.*))?$"
)
SXID = re.compile(
    r"(?P<switch>nvidia-nvswitch\d*): SXid \((?P<pci>[^)]*)\): (?P<sxid>\d+)(?:,\s*(?P<rest>.*))?$"
)
IDENTITY = re.compile(r"NVRM: GPU at (?P<pci>PCI:[0-9a-fA-Fx:.]+): (?P<uuid>\S*)\s*$")
UUID = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
SERIAL = re.compile(r"NVRM: GPU Board Serial Number:[ \t]*(?P<serial>\S*)")
SERIAL_IS = re.compile(r"NVRM: GPU (?P<pci>" + BDF + r"): GPU serial number is[ \t]*(?P<serial>\S*?)\.?\s*$")
# Values people redact before posting a log, or the driver prints when it has none.
_REDACTED = re.compile(r"[xX*#?.\-_]+|<[^>]*>|\[[^\]]*\]|N/?A|none|unknown|redacted|0+", re.IGNORECASE)
FALLEN_START = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>\S+)(?:\s|$)")
FALLEN_ONE = re.compile(
    r"NVRM: GPU (?:at )?(?P<pci>(?:PCI:)?(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):?\s.*"
    r"fallen off the bus"
)
NVRM = re.compile(r"NVRM:?[ \t](?P<text>.*)$")
_NVRM_GPU = re.compile(r"^GPU (?:at )?(?P<pci>(?:PCI:)?[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):")
DEVICE_LINE = re.compile(r"(?P<drv>[\w.-]+) (?P<bdf>" + BDF + r"): (?P<text>.*)$")
_AER_RECEIVED = re.compile(
    r"(?:AER: )?(?P<what>(?:Multiple )?(?:Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<sev>Non-Fatal|Fatal)\))? error(?: message)?) received"
    r"(?:(?::| from) (?P<src>" + BDF + r")|: id=(?P<rid>[0-9a-fA-F]{4}))"
)
_AER_HEADER = re.compile(
    r"(?:AER: )?PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<type>[^,]+), (?:id=[0-9a-fA-F]{4})?"
    r"\((?P<agent>[^)]*)\)"
)
_AER_DEVICE = re.compile(r"device \[(?P<vendor>[0-9a-fA-F]{4}):(?P<devid>[0-9a-fA-F]{4})\] error status/mask=")
_AER_ERRNAME = re.compile(
    r"^(?:AER:)?\s*\[\s*(?P<bit>\d+)\]\s+(?P<name>[A-Za-z][\w ]*?)\s*(?:\((?P<note>[^)]*)\))?\s*$"
)
_AER_OTHER = re.compile(r"TLP Header:|Error of this Agent is reported first|AER: +aer_")

_GPC = re.compile(r"\(GPC (?P<gpc>\d+), TPC (?P<tpc>\d+)(?:, SM (?P<sm>\d+))?\)(?::\s*(?P<exc>[^.]+))?")
_MMU = re.compile(
    r"MMU Fault: ENGINE (?P<engine>\S+) (?P<client>\S+) faulted @ (?P<addr>0x[0-9a-fA-F_]+)\.?"
    r"(?: Fault is of type (?P<ftype>\S+)(?: (?P<access>\S+))?)?"
)
_RECOVERY = re.compile(
    r"GPU recovery action changed from (?P<old_code>0x[0-9a-fA-F]+) \((?P<old>[^)]*)\) to "
    r"(?P<new_code>0x[0-9a-fA-F]+)(?: \((?P<new>[^)]*)\)?)?"
)
_LINKS = re.compile(r"\b[Ll]inks? (?P<ids>\d+(?:\s*(?:,|and)\s*\d+)*)")
_LINK_MASK = re.compile(r"\b[Ll]inks? (?:mask )?(?P<mask>0x[0-9a-fA-F]+)")
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
        d["recovery_action_new_code"] = int(rec["new_code"], 16)
    if "ink" in msg or "INK" in msg:
        links = _LINKS.search(msg)
        if links:
            d["nvlink_links"] = [int(x) for x in re.findall(r"\d+", links["ids"])]
        mask = _LINK_MASK.search(msg)
        if mask:
            bits = int(mask["mask"], 16)
            d["nvlink_links"] = [i for i in range(64) if bits >> i & 1]
    return d


def _match_xid(line: str) -> Match | None:
    m = XID.search(line)
    if not m:
        return None
    pci_text, code, raw_pid, name, msg = m.groups()
    pid: int | None = None
    process: str | None = None
    if raw_pid is not None:
        raw_pid = raw_pid.strip()
        pid = int(raw_pid) if raw_pid.lstrip("-").isdigit() else None
    if name is not None:
        name = name.strip()
        process = None if name.strip("'\"") in ("<unknown>", "") else name
    msg = msg.strip() if msg else ""
    xid = int(code)
    return Match(
        kind="xid",
        start=m.start(),
        message=msg,
        pci=normalize_pci(pci_text),
        xid=xid,
        pid=pid,
        process=process,
        details=_xid_details(xid, msg) if msg else {},
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
    links = re.search(r"\bLink (\d+)", rest)
    if links:
        d["nvlink_links"] = [int(links[1])]
    return Match(kind="sxid", start=m.start(), message=rest, pci=normalize_pci(m["pci"]), sxid=int(m["sxid"]),
                 details=d)


def _match_device_line(line: str) -> Match | None:
    """AER lines and other `<driver> <bdf>: ...` lines."""
    m = DEVICE_LINE.search(line)
    if not m:
        return None
    drv, bdf, text = m["drv"], normalize_pci(m["bdf"]), m["text"]
    rcv = _AER_RECEIVED.search(text)
    if rcv:
        return Match(kind="pcie_aer", start=m.start(), message=f"{drv} {bdf}: {text}", pci=bdf,
                     source_pci=normalize_pci(rcv["src"]) if rcv["src"] else requester_pci(bdf, rcv["rid"]),
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
    return Match(kind="device_line", start=m.start(), message=text, pci=bdf, driver=drv)


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
    if _AER_OTHER.search(text):
        return {}
    return None


def _value_state(value: str) -> str:
    """`ok`, `empty` or `redacted` (a placeholder such as `xxxx`, `N/A`, `<redacted>`)."""
    if not value:
        return "empty"
    return "redacted" if _REDACTED.fullmatch(value) else "ok"


def _identity(line: str, text: str, start: int) -> Match | None:
    ident = IDENTITY.search(line)
    if ident:
        raw_uuid = ident["uuid"]
        uuid_ok = UUID.fullmatch(raw_uuid) is not None
        state = "ok" if uuid_ok else _value_state(raw_uuid[4:] if raw_uuid[:4].upper() == "GPU-" else raw_uuid)
        return Match(kind="gpu_identity", start=start, message=text, pci=normalize_pci(ident["pci"]),
                     gpu_uuid="GPU-" + raw_uuid[4:].lower() if uuid_ok else None, expects="serial",
                     details={} if uuid_ok else {"uuid_state": "malformed" if state == "ok" else state,
                                                 "uuid_text": raw_uuid})
    ser = SERIAL.search(line) or SERIAL_IS.search(line)
    if ser:
        value = ser["serial"]
        state = _value_state(value)
        pci = normalize_pci(ser["pci"]) if "pci" in ser.groupdict() else None
        return Match(kind="gpu_identity", start=start, message=text, pci=pci,
                     serial=value if state == "ok" else None,
                     details={} if state == "ok" else {"serial_state": state, "serial_text": value})
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
        return Match(kind="driver_error", start=start, message=text, pci=normalize_pci(pci_text),
                     details={"error": name}, function=function_of(text),
                     expects="crash_dump" if name == "crash_dump" else "body" if name in BODY_CLASSES else None)
    if BODY.match(text):
        return Match(kind="nvrm_body", start=start, message=text)
    pci = normalize_pci(gpu["pci"]) if gpu else None
    if _ECC_WORDS.search(text):
        return Match(kind="ecc", start=start, message=text, pci=pci)
    if looks_like_error(text):
        return Match(kind="driver_error", start=start, message=text, pci=pci or normalize_pci(pci_in(text)),
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
    got = _identity(line, text, start)
    if got:
        return got
    fs = FALLEN_START.search(line)
    if fs and "fallen off the bus" not in text:
        return Match(kind="gpu_fallen_off_bus", start=start, message=text, pci=normalize_pci(fs["pci"]),
                     expects="fallen")
    if "fallen off the bus" in text:
        fo = FALLEN_ONE.search(line) or fs
        return Match(kind="gpu_fallen_off_bus", start=start, message=text,
                     pci=normalize_pci(fo["pci"]) if fo else None)
    return _driver_line(text, raw_text, start)


def recognise(line: str) -> Match | None:
    """The first recogniser that finds its message in the line, or None."""
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
        return _match_device_line(line)
    return None
