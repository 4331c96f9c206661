"""One severity table for every sink: how urgent an incident is, from its fault family and what the
cordon decision came to.

A family has a base severity (a GPU lost from the bus is critical, an NVSwitch's non-fatal report a
warning, an application fault information for its owners); the decision moves it:

- `held`, `failed`: one step up: the cordon policy asked for the node to be taken out of service and
  it was not (the breaker held it back, or the cordon failed), so a person must act now;
- `not_needed`: one step down: the policy judged the node fine to keep working;
- any other decision: the family's base.

A fleet incident (one family on many nodes at once) is one step above its family. The table is
documented in docs/notifications.md (a test holds the two equal); the ticket's Jira priority is the
ticket policy's name for the severity (`TicketPolicy.priority_by_severity`), and a paging sink
sends the severity itself. Pure.
"""

from __future__ import annotations

from enum import StrEnum

from models.account import Decision
from models.vocabulary import ComponentKind, Family


class Severity(StrEnum):
    """How urgent an incident is, most urgent first (the names Alertmanager and PagerDuty use)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


SEVERITIES: tuple[Severity, ...] = tuple(Severity)  # most urgent first

BASE: dict[Family, Severity] = {
    Family.GPU_LOST: Severity.CRITICAL,  # the GPU is gone and its jobs with it
    Family.GSP: Severity.ERROR,
    Family.MEMORY: Severity.ERROR,
    Family.NVSWITCH: Severity.WARNING,
    Family.NVLINK: Severity.ERROR,
    Family.GPU_HARDWARE: Severity.ERROR,
    Family.PCIE: Severity.WARNING,
    Family.THERMAL: Severity.WARNING,
    Family.DRIVER: Severity.WARNING,
    Family.RECOVERY_ACTION: Severity.ERROR,  # the driver asks for a reset or a reboot
    Family.OTHER: Severity.WARNING,
    Family.APPLICATION: Severity.INFO,  # the job's owners act; no hardware action
}
SHIFT: dict[Decision, int] = {Decision.HELD: -1, Decision.FAILED: -1, Decision.NOT_NEEDED: 1}  # -1: more urgent
_BASE: dict[str, Severity] = {str(k): v for k, v in BASE.items()}
_SHIFT: dict[str, int] = {str(k): v for k, v in SHIFT.items()}


def severity(family: str, decision: str, component: str = ComponentKind.GPU) -> Severity:
    """The incident's severity from its family, the cordon decision's outcome (`models.account.Decision`)
    and its component (a fleet incident is one step above its family)."""
    base = SEVERITIES.index(_BASE.get(family, Severity.WARNING))
    step = _SHIFT.get(decision, 0)
    if component == ComponentKind.FLEET:
        step -= 1
    return SEVERITIES[min(max(base + step, 0), len(SEVERITIES) - 1)]


def table() -> dict[Family, dict[Decision, Severity]]:
    """The whole table, family by family (the documentation's)."""
    return {f: {d: severity(f, d) for d in Decision} for f in Family}
