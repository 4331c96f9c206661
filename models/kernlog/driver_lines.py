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

# (class, pattern over the text after "NVRM: "); order matters: the first match wins.
DRIVER_ERRORS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("gpu_lost", r"(?:Assertion|Check) failed.*(?:GPU_IS_LOST|GPU lost|lost from the bus)"),
        ("reset_required", r"(?:Assertion|Check) failed.*(?:RESET_REQUIRED|reset required)"),
        ("rm_init_adapter_failed", r"RmInitAdapter failed|rm_init_adapter failed"),
        ("gsp_rpc_rate_limited", r"Rate limiting GSP RPC error prints"),
        ("gsp_init_failed", r"Cannot initialize GSP firmware|_kgspBootGspRm\b|cannot proceed with booting GSP"),
        ("firmware_missing", r"No firmware image found|firmware load .* failed"),
        ("firmware_boot_failed", r"GFW_BOOT|GFW boot"),
        ("vbios_error", r"\bvbios\b.*\b(?:fail|error|invalid|corrupt)|\b(?:fail|error|invalid)\w*\b.*\bvbios\b"),
        ("gsp_heartbeat_timeout", r"GSP.*heartbeat|heartbeat.*(?:timed out|timeout)"),
        ("gsp_rpc_timeout", r"waiting for RPC response from GPU\d* GSP|GSP RPC timeout|_kgspLogRpcTimeout|"
                            r"GSP Timeout|GSP.*timed? ?out"),
        ("gsp_crash", r"GSP-CrashCat|GSP task (?:exception|panic)|libos .*(?:error|crash|panic)"),
        ("gsp_core_dump", r"kflcnCoreDump"),
        ("gsp_error", r"\bGSP\b.*\b(?:error|crash|fail)"),
        ("crash_dump", r"GPU crash dump has been created|GPU crash dump created"),
        ("no_gpu_found", r"No NVIDIA (?:graphics adapter|GPU)s? (?:found|probed)|No NVIDIA GPU found|"
                         r"None of the NVIDIA devices were initialized"),
        ("init_failed", r"NVIDIA init module failed|init_module failed"),
        ("probe_failed", r"The NVIDIA probe routine failed"),
        ("driver_conflict", r"probe routine was not called"),
        ("pci_resource_invalid", r"PCI I/O region assigned to your NVIDIA device is invalid|\bBAR\d+ is \d+M @"),
        ("api_mismatch", r"API mismatch"),
        ("attach_failed", r"Cannot attach gpu|osInitNvMapping failed|failed to (?:attach|map) (?:the )?gpu"),
        ("open_failed", r"module->open\(\) failed|\bopen\(\) failed"),
        ("device_removal", r"Attempting to remove (?:device|GPU) .*(?:non-zero usage count|in use)"),
        ("nvlink_error", r"knvlink\w*:.*\b(?:fail|error|timeout)|NVLink.*training.*fail"),
        ("memory_subsystem_error", r"Memory Subsystem Error|_kgspCheckIfMemsysError|"
                                   r"k(?:bus|gmmu|mem)\w*:.*\b(?:timeout|error|fail)"),
        ("mig_error", r"\bMIG\b.*\b(?:fail|error)|kmigmgr\w*:.*\bfail"),
        ("rm_thread_timeout", r"_threadNodeCheckTimeout"),
        ("assertion_failed", r"(?:Assertion|Check) failed|nvAssert\w*Failed|nvCheck\w*Failed"),
    )
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
    r"^\s|^(?:GPU\d+ )?(?:RPC (?:event )?history|GSP RPC buffer contains|_kgspLogRpcTimeout:|_kgspLogXid119|"
    r"kflcnCoreDump\w*:|Reported by libos|RISC-V)"
)
BENIGN = re.compile(
    r"^(?:loading NVIDIA UNIX|NVRM version|GPU at \S+ has software scheduler|nvidia-nvlink|"
    r"(?:GPU\d+ )?testIfDsmSubFunctionEnabled|(?:GPU\d+ )?iovaspaceDestruct_IMPL|"
    r"(?:GPU\d+ )?kgspExecuteBooterUnloadIfNeeded|(?:GPU\d+ )?kgspInitRm_IMPL: skipping|"
    r"NVLink link training completed|Persistence mode is deprecated)",
    re.IGNORECASE,
)
ERROR_WORDS = re.compile(
    r"\b(?:fail(?:s|ed|ure)?|errors?|timed? ?out|timeout|unable|cannot|can't|invalid|lost|abort(?:ed|ing)?|"
    r"panic|crash(?:ed)?|exception|fault|mismatch|not responding|refus\w*|reject\w*|denied|corrupt\w*|"
    r"unexpected|bad|hang|hung|stuck)\b",
    re.IGNORECASE,
)
_FUNCTION = re.compile(r"^(?:GPU\d+ )?(?P<fn>_?[A-Za-z]\w*):")
_ANY_PCI = re.compile(r"(?:PCI:)?(?P<pci>" + BDF + r"|[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\b)")


def driver_error_class(text: str) -> str | None:
    """The named class of an NVRM message text, or None."""
    for name, pattern in DRIVER_ERRORS:
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
