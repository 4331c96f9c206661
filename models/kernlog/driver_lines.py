"""What the NVIDIA driver's other `NVRM:` lines mean: named error classes, body lines, banners.

Every NVRM line that is not an Xid, an identity line or a "fallen off the bus" notice is one of:

- a named driver-error class (`DRIVER_ERRORS`, first match wins), which becomes a `driver_error`
  record with `details.error` set to the class name;
- a body line of a multi-line message (an RPC-history table after Xid 119, a GSP crash report
  after Xid 120, a falcon core dump, the rest of an "API mismatch" notice), which joins the record
  it belongs to verbatim;
- a documented benign line (`BENIGN`: the module banner, scheduler and ACPI notes), which is
  nothing;
- an error-looking line no class names (`ERROR_WORDS`), which becomes a `driver_error` record with
  `error: "unclassified"`, so that nothing the driver said at fault time is lost.

The class names are stable: `models.families` maps `gpu_lost` and every `gsp_*` name.
"""

from __future__ import annotations

import re

from models.pci import BDF

# (class, alternatives over the text after "NVRM: "); the first class with a matching alternative
# wins. An alternative is one pattern, or a sequence of patterns that must occur in this order
# ("A, then later B"): each is searched once from where the one before it ended, which keeps the
# test linear in the line (a pattern `A.*B` re-scans the line from every occurrence of A).
_ERROR_SPECS: tuple[tuple[str, tuple[str | tuple[str, ...], ...]], ...] = (
    ("gpu_lost", (("(?:Assertion|Check) failed", "GPU_IS_LOST|GPU lost|lost from the bus"),)),
    ("reset_required", (("(?:Assertion|Check) failed", "RESET_REQUIRED|reset required"),)),
    ("rm_init_adapter_failed", (r"RmInitAdapter failed|rm_init_adapter(?:\([0-9]{1,3}\))? failed",)),
    ("gsp_rpc_rate_limited", ("Rate limiting GSP RPC error prints",)),
    ("gsp_init_failed", (r"Cannot initialize GSP firmware|_kgspBootGspRm\b|cannot proceed with booting GSP",)),
    ("firmware_missing", ("No firmware image found", ("firmware load ", " failed"))),
    ("firmware_boot_failed", ("GFW_BOOT|GFW boot",)),
    ("vbios_error", ((r"\bvbios\b", r"\b(?:fail|error|invalid|corrupt)"),
                     (r"\b(?:fail|error|invalid)\w*\b", r"\bvbios\b"))),
    ("gsp_heartbeat_timeout", (("GSP", "heartbeat"), ("heartbeat", "timed out|timeout"))),
    ("gsp_rpc_timeout", ("waiting for RPC response from GPU[0-9]* GSP|GSP RPC timeout|_kgspLogRpcTimeout|GSP Timeout",
                         ("GSP", "timed? ?out"))),
    ("gsp_crash", (r"GSP-CrashCat|GSP task (?:exception|panic)", ("libos ", "error|crash|panic"))),
    ("gsp_core_dump", ("kflcnCoreDump",)),
    ("gsp_error", ((r"\bGSP\b", r"\b(?:error|crash|fail)"),)),
    ("crash_dump", ("GPU crash dump has been created|GPU crash dump created",)),
    ("no_gpu_found", ("No NVIDIA (?:graphics adapter|GPU|device)s? (?:found|probed)|No NVIDIA GPU found|"
                      "None of the NVIDIA (?:devices|graphics adapters) were initiali[sz]ed",)),
    # A GPU the driver does not take: a legacy GPU, or one this release (or the open module) does
    # not support. The multi-line notices are read whole (`models.kernlog.notices`); these are
    # their lines met on their own.
    ("legacy_gpu", (r"ignoring the legacy GPU|supported through the NVIDIA \S{1,16} Legacy driver",)),
    ("gpu_not_supported", ("installed in this (?:vGPU host )?system is not supported by",)),
    ("init_failed", ("NVIDIA init module failed|init_module failed",)),
    ("probe_failed", ("The NVIDIA probe routine failed",)),
    ("driver_conflict", ("probe routine was not called",)),
    ("pci_resource_invalid", (r"PCI I/O region assigned to your NVIDIA device is invalid|\bBAR[0-9]+ is [0-9]+M @"
                              r"|64-bit BAR mapped above 4GB",)),
    ("api_mismatch", ("API mismatch",)),
    ("attach_failed", ("Cannot attach gpu|osInitNvMapping failed|failed to (?:attach|map) (?:the )?gpu",)),
    ("open_failed", (r"module->open\(\) failed|\bopen\(\) failed",)),
    ("device_removal", (("Attempting to remove (?:device|GPU) ", "non-zero usage count|in use"),)),
    ("nvlink_error", ((r"knvlink\w*:", r"\b(?:fail|error|timeout)"), ("NVLink", "training", "fail"))),
    ("memory_subsystem_error", ("Memory Subsystem Error|_kgspCheckIfMemsysError",
                                (r"k(?:bus|gmmu|mem)\w*:", r"\b(?:timeout|error|fail)"))),
    ("mig_error", ((r"\bMIG\b", r"\b(?:fail|error)"), (r"kmigmgr\w*:", r"\bfail"))),
    ("rm_thread_timeout", ("_threadNodeCheckTimeout",)),
    ("assertion_failed", (r"(?:Assertion|Check) failed|nvAssert\w{0,40}Failed|nvCheck\w{0,40}Failed",)),
)


class _InOrder:
    """Patterns that must occur in this order in a text, each found once (linear time)."""

    __slots__ = ("patterns",)

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = tuple(re.compile(p, re.IGNORECASE) for p in patterns)

    def search(self, text: str) -> bool:
        pos = 0
        for pattern in self.patterns:
            m = pattern.search(text, pos)
            if m is None:
                return False
            pos = m.end()
        return True


def _alternatives(specs: tuple[str | tuple[str, ...], ...]) -> tuple[re.Pattern[str] | _InOrder, ...]:
    return tuple(re.compile(s, re.IGNORECASE) if isinstance(s, str) else _InOrder(s) for s in specs)


DRIVER_ERRORS: tuple[tuple[str, tuple[re.Pattern[str] | _InOrder, ...]], ...] = tuple(
    (name, _alternatives(specs)) for name, specs in _ERROR_SPECS
)
# Classes whose message spans several printk lines with no marker of their own: the lines that
# follow within a few lines (and are nothing else) belong to the record.
TEXT_CONTINUED = frozenset({"api_mismatch", "driver_conflict", "pci_resource_invalid", "gsp_init_failed"})
# Records that take body lines (RPC history, crash reports, core dumps): Xid 119 and 120, and
# these driver-error classes.
BODY_XIDS = frozenset({119, 120, 140, 143, 154})
BODY_CLASSES = frozenset({
    "gsp_rpc_timeout", "gsp_crash", "gsp_core_dump", "gsp_error", "gsp_heartbeat_timeout", "crash_dump",
    "memory_subsystem_error", "rm_thread_timeout",
}) | TEXT_CONTINUED
# A body line: indented after "NVRM:", or one of the table/report headers the driver prints.
BODY = re.compile(
    r"^\s|^(?:GPU[0-9]+ )?(?:RPC (?:event )?history|GSP RPC buffer contains|_kgspLogRpcTimeout:|_kgspLogXid119|"
    r"kflcnCoreDump\w*:|Reported by libos|RISC-V)"
)
BENIGN = re.compile(
    r"^(?:loading NVIDIA UNIX|NVRM version|GPU at \S+ has software scheduler|nvidia-nvlink|"
    r"(?:GPU[0-9]+ )?testIfDsmSubFunctionEnabled|(?:GPU[0-9]+ )?iovaspaceDestruct_IMPL|"
    r"(?:GPU[0-9]+ )?kgspExecuteBooterUnloadIfNeeded|(?:GPU[0-9]+ )?kgspInitRm_IMPL: skipping|"
    r"NVLink link training completed|Persistence mode is deprecated|"
    # The driver's debug trace (`NVreg_ResmanDebugLevel`): device opens and ioctls.
    r"(?:GPU \S+: )?(?:Opening|Closing) GPU with minor number|ioctl\(|nvidia_(?:open|close)\.\.\.)",
    re.IGNORECASE,
)
ERROR_WORDS = re.compile(
    r"\b(?:fail(?:s|ed|ure)?|errors?|timed? ?out|timeout|unable|cannot|can't|invalid|lost|abort(?:ed|ing)?|"
    r"panic|crash(?:ed)?|exception|fault|mismatch|not responding|refus\w*|reject\w*|denied|corrupt\w*|"
    r"unexpected|bad|hang|hung|stuck|halted)\b",
    re.IGNORECASE,
)
_FUNCTION = re.compile(r"^(?:GPU[0-9]+ )?(?P<fn>_?[A-Za-z]\w{0,128}):")
_ANY_PCI = re.compile(r"(?:PCI:)?(?P<pci>" + BDF + r"|[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\b)")


# What a class's line says beyond its name: `RmInitAdapter failed! (0x26:0x56:1463)` (the init
# stage, the NV_STATUS code, the source line), the devices a probe failed for, the versions of an
# API mismatch.
_RM_INIT = re.compile(r"\((?P<init>0x[0-9a-fA-F]{1,8}):(?P<rm>0x[0-9a-fA-F]{1,8}):(?P<line>[0-9]{1,6})\)")
_DEVICES = re.compile(r"\bfor (?P<n>[0-9]{1,4}) device\(s\)")
_MISMATCH = re.compile(r"client has the version (?P<client>[0-9][0-9.]{0,20}[0-9]), but")


def class_details(name: str, text: str) -> dict[str, object]:
    """The values a driver-error line of class `name` carries."""
    if name == "rm_init_adapter_failed":
        m = _RM_INIT.search(text)
        return {"init_status": m["init"], "rm_status": m["rm"], "rm_line": int(m["line"])} if m else {}
    if name in ("probe_failed", "driver_conflict"):
        n = _DEVICES.search(text)
        return {"devices": int(n["n"])} if n else {}
    if name == "api_mismatch":
        v = _MISMATCH.search(text)
        return {"client_version": v["client"]} if v else {}
    return {}


def driver_error_class(text: str) -> str | None:
    """The named class of an NVRM message text, or None."""
    for name, alternatives in DRIVER_ERRORS:
        for pattern in alternatives:
            if pattern.search(text):
                return name
    return None


def is_benign(text: str) -> bool:
    """A documented informational NVRM line (banner, scheduler, ACPI note): never a record."""
    return BENIGN.match(text) is not None


def looks_like_error(text: str) -> bool:
    return ERROR_WORDS.search(text) is not None


def function_of(text: str) -> str | None:
    """The driver function that printed the line (`_kgspIsHeartbeatTimedOut`), when it names one."""
    m = _FUNCTION.match(text)
    return m["fn"] if m else None


def pci_in(text: str) -> str | None:
    """The first PCI address written anywhere in the text."""
    m = _ANY_PCI.search(text)
    return m["pci"] if m else None
