"""xidpipe's vocabulary: the closed sets of names that decisions, tables, messages and policy files
share, each written once, and the fault code as a value.

Every set is an `enum.StrEnum`: a member equals, hashes and formats as its string
(`Family.GPU_LOST == "gpu_lost"`, `f"{Family.GPU_LOST}"` is `gpu_lost`), and JSON, SQL and
pydantic's JSON mode write it as that string, so messages, rows and outputs keep their names.
Where a set is printed through `repr` (argparse's choices, "did you mean"), pass `values(Set)`.

- `Family`: the kind of fault a report is (`models.families.family_of`). `FAMILY_PRECEDENCE` is
  the one order among families: an incident is labelled with the most severe it saw.
- `Category`: an incident's class; `CATALOG_CATEGORIES` those the catalog assigns, `VERDICTS`
  those the classification decides, `HARDWARE_CATEGORIES` those counted as a card's own faults.
- `ImmediateAction`, `InvestigatoryAction`: NVIDIA's actions, as the catalog's two columns name them.
  Their precedence is the runbook's `order` (`models/catalog/runbook.yaml`), reviewed with the steps.
- `ComponentKind`: what an incident is about (`models.identity`).
- `CordonOutcome`, `ReleaseOutcome`: what the cordon and release decisions decide (`models.cordon`);
  `ActionOutcome`: what the action log records an executed or decided action came to.
- `RecoveryAction`: NVIDIA's GPU recovery action (Xid 154, NVML's recovery-action field).
- `RemediationAction`, `RemediationStage`: the remediation ladder's next step and the stages of a
  remediation loop after the cordon (`models.remediation`, `models.remediation_loop`).
- `FaultCode`: a numbered code (an Xid or an SXid and its number). Decisions take the number;
  `code_text` is its one display string, what fault events and incidents store and every output
  shows; `stored_code` reads a stored one back, at the storage boundary only.

Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


def values(names: type[StrEnum]) -> tuple[str, ...]:
    """The set's strings as plain `str`, in declaration order (for argparse, whose messages use `repr`)."""
    return tuple(member.value for member in names)


# --- fault families ------------------------------------------------------------------------------


class Family(StrEnum):
    """The kind of fault a report is. Stable names: the cordon policy matches them, the taint carries
    them, a fleet incident's fingerprint hashes them."""

    GPU_LOST = "gpu_lost"  # the GPU left the bus (Xid 79, "fallen off the bus", NVML GPU lost)
    MEMORY = "memory"  # ECC, row remapping, memory page retirement
    NVLINK = "nvlink"
    NVSWITCH = "nvswitch"  # SXid reports
    PCIE = "pcie"  # AER reports
    GSP = "gsp"  # the GPU System Processor (Xid 119, 120, GSP RPC timeouts)
    APPLICATION = "application"  # application-class Xids (13, 31, 43, ...)
    GPU_HARDWARE = "gpu_hardware"  # other hardware faults of the GPU
    DRIVER = "driver"
    THERMAL = "thermal"
    RECOVERY_ACTION = "recovery_action"  # Xid 154 and NVML's recovery action: what the driver asks for now
    OTHER = "other"  # a code the catalog leaves unused


FAMILIES: tuple[Family, ...] = tuple(Family)

# Most severe first: an incident that saw several families is labelled with the first (an AER report
# followed by Xid 79 is a lost GPU; ECC errors on a GPU that also crashed jobs are a memory fault;
# an application fault ranks last, so any other report on the same component names the cause).
# The cordon policy's `families` match this label (`models.identity.primary_family`).
FAMILY_PRECEDENCE: tuple[Family, ...] = (
    Family.GPU_LOST, Family.GSP, Family.MEMORY, Family.NVSWITCH, Family.NVLINK, Family.GPU_HARDWARE, Family.PCIE,
    Family.THERMAL, Family.DRIVER, Family.RECOVERY_ACTION, Family.OTHER, Family.APPLICATION,
)
_FAMILY_RANK = {family.value: i for i, family in enumerate(FAMILY_PRECEDENCE)}


def family_rank(family: str) -> int:
    """The family's place in `FAMILY_PRECEDENCE` (0: most severe); a name outside it ranks after all."""
    return _FAMILY_RANK.get(family, len(_FAMILY_RANK))


# --- categories ----------------------------------------------------------------------------------


class Category(StrEnum):
    """An incident's class, always decided with a reason (`models.classify`)."""

    APPLICATION = "application"
    SUSPECTED_HARDWARE = "suspected_hardware"  # an application-class fault that stays with one GPU
    HARDWARE = "hardware"
    DRIVER = "driver"
    INTERCONNECT = "interconnect"
    THERMAL = "thermal"
    UNKNOWN = "unknown"
    FLEET = "fleet"  # a fleet incident: one family on many nodes, or a tripped breaker


# What NVIDIA's catalog assigns a code (derived by scripts/build_catalog.py, one per code in xid.tsv).
CATALOG_CATEGORIES: tuple[Category, ...] = (
    Category.APPLICATION, Category.HARDWARE, Category.DRIVER, Category.INTERCONNECT, Category.THERMAL,
    Category.UNKNOWN,
)
# What classification decides for a node's incident: the catalog's, or suspected hardware. The cordon
# policy's `categories` match these (a fleet incident is never cordoned).
VERDICTS: tuple[Category, ...] = tuple(c for c in Category if c is not Category.FLEET)
# The card's own faults: what a GPU's history counts and the heatmap shows.
HARDWARE_CATEGORIES: tuple[Category, ...] = (Category.HARDWARE, Category.SUSPECTED_HARDWARE, Category.INTERCONNECT)


# --- NVIDIA's catalog actions --------------------------------------------------------------------


class ImmediateAction(StrEnum):
    """NVIDIA's immediate action for an Xid (xid.tsv, column `immediate_action`)."""

    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    IGNORE = "IGNORE"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    CHECK_UVM = "CHECK_UVM"
    UPDATE_SWFW = "UPDATE_SWFW"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    XID_154 = "XID_154"


class InvestigatoryAction(StrEnum):
    """NVIDIA's investigatory action for an Xid (xid.tsv, column `investigatory_action`), verbatim:
    a few of NVIDIA's entries are phrases rather than names."""

    CHECK_APP_CUDA = "CHECK_APP/CUDA"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    IGNORE = "IGNORE"
    IGNORE_SYMPATHETIC = "IGNORE (sympathetic)"
    INFORMATIONAL = "N/A Informational only regarding another Xid"
    INVESTIGATE_LINK_SI = "INVESTIGATE_LINK_SI"
    INVESTIGATE_SW = "INVESTIGATE_SW"
    INVESTIGATE_SW_USER = "INVESTIGATE_SW_USER"
    RESTART_FM_WHEN_SOLO = "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)"
    SYMPATHETIC_REPORT_SOLO = "SYMPATHETIC_REPORT_SOLO"
    UPDATE_SWFW = "UPDATE_SWFW"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    WORKFLOW_XID_13 = "WORKFLOW_XID_13"
    WORKFLOW_XID_31 = "WORKFLOW_XID_31"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    XID_137_FLOW = "XID_137_FLOW"


# --- components ----------------------------------------------------------------------------------


class ComponentKind(StrEnum):
    """What an incident is about (`models.identity`); part of every incident fingerprint."""

    GPU = "gpu"  # by its UUID (its PCI address until the UUID is known)
    NVSWITCH = "nvswitch"  # by its PCI address
    NODE = "node"  # a node's driver
    WORKLOAD = "workload"  # application faults that follow one job across GPUs and nodes
    FLEET = "fleet"  # one family on many nodes, or a tripped breaker


# --- decision outcomes ---------------------------------------------------------------------------


class CordonOutcome(StrEnum):
    """What the cordon decision decides (`models.cordon.decide_cordon`)."""

    CORDON = "cordon"  # cordon, taint, annotate, condition, event
    REPEAT = "repeat"  # already cordoned by xidpipe for this incident; the incident repeated: update the event series
    ALREADY_CORDONED = "already_cordoned"  # nothing to do (redelivery, or cordoned by xidpipe for another incident)
    NOT_NEEDED = "not_needed"  # the policy does not ask for a cordon
    NODE_MISSING = "node_missing"
    FOREIGN_CORDON = "foreign_cordon"  # cordoned by someone else: never touched
    OPTED_OUT = "opted_out"
    OUT_OF_SCOPE = "out_of_scope"
    BREAKER_OPEN = "breaker_open"  # the breaker is tripped: no automatic cordon
    TRIP_BREAKER = "trip_breaker"  # this cordon would pass the breaker's limit: trip it, raise a fleet incident
    QUARANTINE = "quarantine"  # a quarantine_gpu rule: one DeviceTaintRule on the faulty GPU, the node condition
    ALREADY_QUARANTINED = "already_quarantined"  # the GPU's rule exists (redelivery, a repeat, another incident's)
    FOREIGN_QUARANTINE = "foreign_quarantine"  # the GPU's rule was changed by someone else: never touched


class ReleaseOutcome(StrEnum):
    """What the release decision decides (`models.cordon.decide_release`)."""

    RELEASE = "release"
    REFUSE = "refuse"
    NODE_MISSING = "node_missing"


class ActionOutcome(StrEnum):
    """What an executed or decided action came to, as the action log records it."""

    DONE = "done"
    NOOP = "noop"  # nothing left to change (already cordoned; a breaker reset while it was closed)
    DRY_RUN = "dry_run"
    SKIPPED = "skipped"  # decided against (the decision's outcome says why)
    REFUSED = "refused"  # a release the decision refused
    BLOCKED = "blocked"  # held back: by the breaker it tripped, or evictions a disruption budget blocked
    FAILED = "failed"
    FENCED = "fenced"  # a write not sent: the replica no longer held the Lease it last renewed (retried by the leader)


class RecoveryAction(StrEnum):
    """The GPU recovery action the driver asks for (NVML's `nvmlDeviceGpuRecoveryAction_t`, reported by
    Xid 154 and NVML's recovery-action field; `models.catalog.RECOVERY_ACTIONS` numbers them)."""

    NONE = "NONE"
    GPU_RESET = "GPU_RESET"
    NODE_REBOOT = "NODE_REBOOT"
    DRAIN_P2P = "DRAIN_P2P"
    DRAIN_AND_RESET = "DRAIN_AND_RESET"
    RECOVER_IMEX_DOMAIN = "RECOVER_IMEX_DOMAIN"
    BUS_RESET = "BUS_RESET"
    SYSTEM_REBOOT = "SYSTEM_REBOOT"


class RemediationAction(StrEnum):
    """The remediation ladder's next step for a cordoned node's fault (`models.remediation`)."""

    NONE = "none"  # nothing xidpipe may do: the node stays cordoned for people (the reason says why)
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    HAND_OFF = "hand_off"  # the site's own tooling carries out the reset or reboot (BMC, cloud API)
    RMA = "rma"  # replace the card: the node stays cordoned, the ledger marks the card


class RemediationStage(StrEnum):
    """Where a remediation loop stands (`models.remediation_loop`); the last five are final."""

    QUEUED = "queued"  # waiting for a slot: remediations in flight are capped per pool
    EVIDENCE = "evidence"  # waiting for the incident's evidence to be stored (and the bug report)
    DRAINING = "draining"  # evicting the pods (Eviction API, disruption budgets honoured)
    EXECUTING = "executing"  # the reset or reboot Job (or the hand-off), until it is confirmed
    VALIDATING = "validating"  # the DCGM diagnostics Job
    RETURNING = "returning"  # lifting xidpipe's cordon
    RETURNED = "returned"  # back in service after validation passed
    RMA = "rma"  # the card is to be replaced; the node stays cordoned
    MANUAL = "manual"  # handed to people (the reason says why); the node stays cordoned
    CANCELLED = "cancelled"  # an operator uncordoned or released the node, or cancelled the loop
    DRY_RUN = "dry_run"  # decided and recorded, nothing done


FINAL_STAGES: frozenset[RemediationStage] = frozenset({
    RemediationStage.RETURNED, RemediationStage.RMA, RemediationStage.MANUAL, RemediationStage.CANCELLED,
    RemediationStage.DRY_RUN,
})


# --- fault codes ---------------------------------------------------------------------------------


class CodeKind(StrEnum):
    """The numbered fault codes; the value is how a code is written."""

    XID = "Xid"  # the GPU driver's
    SXID = "SXid"  # an NVSwitch's


@dataclass(frozen=True, slots=True, order=True)
class FaultCode:
    """A numbered fault code: `FaultCode(CodeKind.XID, 79)` is Xid 79."""

    kind: CodeKind
    number: int

    def __str__(self) -> str:
        return code_text(self)


def code_text(code: FaultCode) -> str:
    """The code's one display string (`Xid 79`, `SXid 12028`): stored in fault events and incidents,
    shown in every reason, message and output."""
    return f"{code.kind.value} {code.number}"


def stored_code(text: str) -> FaultCode | None:
    """The code a stored display string names (`code_text`'s inverse), or None for a report without a
    number ("AER", "fallen off the bus", a driver error). For rows read from storage only: decisions
    take `FaultCode` values."""
    kind, sep, digits = text.partition(" ")
    if not sep or kind not in _CODE_KINDS or not (digits.isascii() and digits.isdigit()):
        return None
    code = FaultCode(CodeKind(kind), int(digits))
    return code if code_text(code) == text else None


_CODE_KINDS = frozenset(values(CodeKind))
# How a report without a numbered code is shown, by its record kind; any other kind is shown as itself.
_UNNUMBERED = {"gpu_fallen_off_bus": "fallen off the bus", "pcie_aer": "AER", "ecc": "ECC",
               "gpu_missing": "GPU missing"}


def fault_code(kind: str, xid: int | None, sxid: int | None) -> FaultCode | None:
    """The numbered code of a fault report of record kind `kind`, or None."""
    if kind == "xid" and xid is not None:
        return FaultCode(CodeKind.XID, xid)
    if kind == "sxid" and sxid is not None:
        return FaultCode(CodeKind.SXID, sxid)
    return None


def report_code(kind: str, xid: int | None, sxid: int | None) -> str:
    """How a fault report's code is shown and stored: its numbered code's `code_text`, else a label
    of its record kind ("fallen off the bus", "AER", "ECC", "GPU missing", or the kind itself)."""
    code = fault_code(kind, xid, sxid)
    return code_text(code) if code is not None else _UNNUMBERED.get(kind, kind)
