"""Recognisers for the kernel messages the NVIDIA driver and the PCIe AER driver print.

Each recogniser finds its message anywhere in a line (so any prefix may stand in front of it) and
returns a `Match`: where the kernel message starts and the fields it carries. The parser adds the
prefix fields, merges multi-line messages and enriches from the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from models.pci import BDF, normalize_pci

# pid=<n|'<unknown>'>[, name=<comm>][, <message>]; a comm may hold spaces (not commas).
XID = re.compile(
    r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)(?:,\s*pid=(?P<pid>[^,]*)(?:,\s*name=(?P<name>[^,]*))?)?"
    r"(?:,\s*(?P<msg>.*))?$"
)
SXID = re.compile(
    r"(?P<switch>nvidia-nvswitch\d*): SXid \((?P<pci>[^)]*)\): (?P<sxid>\d+)(?:,\s*(?P<rest>.*))?$"
)
IDENTITY = re.compile(r"NVRM: GPU at (?P<pci>PCI:[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]{36})\b")
SERIAL = re.compile(r"NVRM: GPU Board Serial Number: (?P<serial>\S+)")
FALLEN_START = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>" + BDF + r")")
FALLEN_ONE = re.compile(
    r"NVRM: GPU (?:at )?(?P<pci>(?:PCI:)?[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):?\s.*"
    r"fallen off the bus"
)
NVRM = re.compile(r"NVRM: (?P<text>.*)$")
_NVRM_GPU = re.compile(r"^GPU (?:at )?(?P<pci>(?:PCI:)?[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):")
DEVICE_LINE = re.compile(r"(?P<drv>[\w.-]+) (?P<bdf>" + BDF + r"): (?P<text>.*)$")
_AER_RECEIVED = re.compile(
    r"(?:AER: )?(?P<what>(?:Multiple )?(?:Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<sev>Non-Fatal|Fatal)\))? error(?: message)?) received(?::| from) (?P<src>" + BDF + r")"
)
_AER_HEADER = re.compile(
    r"(?:AER: )?PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<type>[^,]+), \((?P<agent>[^)]*)\)"
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
    r"(?P<new_code>0x[0-9a-fA-F]+) \((?P<new>[^)]*)\)"
)
_LINKS = re.compile(r"\b[Ll]inks? (?P<ids>\d+(?:\s*(?:,|and)\s*\d+)*)")
_LINK_MASK = re.compile(r"\b[Ll]inks? (?:mask )?(?P<mask>0x[0-9a-fA-F]+)")
_CHANNEL = re.compile(r"\bCh (?P<ch>[0-9a-fA-F]{8})\b")

_ECC_WORDS = re.compile(
    r"\b(?:ECC|DBE|SBE|double[- ]bit|single[- ]bit|row remap\w*|remapped rows|row remapper|page retirement|"
    r"retired pages?)\b",
    re.IGNORECASE,
)
_DRIVER_ERRORS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("rm_init_adapter_failed", re.compile(r"RmInitAdapter failed|rm_init_adapter failed", re.IGNORECASE)),
    ("gsp_heartbeat_timeout", re.compile(r"GSP.*heartbeat|heartbeat.*(?:timed out|timeout)", re.IGNORECASE)),
    ("gsp_rpc_timeout", re.compile(r"Timeout after \S+ of waiting for RPC response from GPU\d* GSP|GSP RPC timeout|"
                                   r"GSP.*timed? ?out", re.IGNORECASE)),
    ("gsp_error", re.compile(r"\bGSP\b.*\b(?:error|crash|fail)", re.IGNORECASE)),
    ("crash_dump", re.compile(r"GPU crash dump has been created|GPU crash dump created", re.IGNORECASE)),
    ("gpu_lost", re.compile(r"(?:Assertion|Check) failed.*(?:GPU_IS_LOST|GPU lost|lost from the bus)", re.IGNORECASE)),
    ("reset_required", re.compile(r"(?:Assertion|Check) failed.*(?:RESET_REQUIRED|reset required)", re.IGNORECASE)),
    ("no_gpu_found", re.compile(r"No NVIDIA (?:graphics adapter|GPU)s? found", re.IGNORECASE)),
    ("api_mismatch", re.compile(r"API mismatch", re.IGNORECASE)),
    ("probe_failed", re.compile(r"The NVIDIA probe routine failed", re.IGNORECASE)),
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
        d["recovery_action_new"] = rec["new"]
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
                     source_pci=normalize_pci(rcv["src"]),
                     details={"severity": _severity(rcv["what"], rcv["sev"]), "errors": []},
                     expects="aer", driver=drv)
    hdr = _AER_HEADER.search(text)
    if hdr:
        return Match(kind="pcie_aer", start=m.start(), message=f"{drv} {bdf}: {text}", pci=bdf, source_pci=bdf,
                     details={"severity": _severity(hdr["sev"], None), "error_type": hdr["type"].strip(),
                              "agent": hdr["agent"], "errors": []},
                     expects="aer", driver=drv)
    return Match(kind="device_line", start=m.start(), message=text, pci=bdf, driver=drv)


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


def _match_nvrm(line: str) -> Match | None:
    """Every other NVRM message: identity, fallen off the bus, ECC, driver errors, or nothing."""
    m = NVRM.search(line)
    if not m:
        return None
    text = m["text"].strip()
    start = m.start()
    ident = IDENTITY.search(line)
    if ident:
        return Match(kind="gpu_identity", start=start, message=text, pci=normalize_pci(ident["pci"]),
                     gpu_uuid=ident["uuid"].lower().replace("gpu-", "GPU-", 1), expects="serial")
    ser = SERIAL.search(line)
    if ser:
        return Match(kind="gpu_identity", start=start, message=text, serial=ser["serial"])
    fs = FALLEN_START.search(line)
    if fs and "fallen off the bus" not in text:
        return Match(kind="gpu_fallen_off_bus", start=start, message=text, pci=normalize_pci(fs["pci"]),
                     expects="fallen")
    if "fallen off the bus" in text:
        fo = FALLEN_ONE.search(line) or fs
        return Match(kind="gpu_fallen_off_bus", start=start, message=text,
                     pci=normalize_pci(fo["pci"]) if fo else None)
    gpu = _NVRM_GPU.match(text)
    pci = normalize_pci(gpu["pci"]) if gpu else None
    for name, pattern in _DRIVER_ERRORS:
        if pattern.search(text):
            return Match(kind="driver_error", start=start, message=text, pci=pci, details={"error": name},
                         expects="crash_dump" if name == "crash_dump" else None)
    if _ECC_WORDS.search(text):
        return Match(kind="ecc", start=start, message=text, pci=pci)
    return None


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
