"""What a health decision finds, and the fault observation it becomes.

A decision (`check`) returns `Finding`s: the fault's kind (its code in the incident), family,
category, NVIDIA's action, a message with the reason and the values, and the condition whose onset
identifies it. `observation` turns one into the `FaultObservation` the stream groups; its record id
and raw text name the component, the check and the onset, never a changing value, so the same
condition reported again (a heartbeat, another reading's change) has the same content hash and is
stored once (`FaultObservation.content_hash`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from models.incidents import FaultObservation, FaultSource
from models.vocabulary import Category, Family, ImmediateAction, InvestigatoryAction


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # the fault's code in its incident (`models.vocabulary.report_code` shows the kind)
    family: Family
    category: Category
    message: str  # what was found, with the values and the threshold
    onset: datetime  # when the condition began (its episode): the fault's identity
    action: ImmediateAction | None = None
    investigatory: InvestigatoryAction | None = None
    description: str | None = None  # what the code means (as the catalog's description of an Xid)
    mnemonic: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


def observation(finding: Finding, *, node: str, source: FaultSource, subject: str, observed_at: datetime,
                gpu_uuid: str | None = None, pci: str | None = None) -> FaultObservation:
    """The finding as a fault report about `subject` (a GPU's UUID, the node)."""
    onset = finding.onset.isoformat()
    return FaultObservation(
        node=node, source=source, record_id=f"{finding.kind}:{subject}:{onset}", occurred_at=observed_at,
        kind=finding.kind, family=finding.family, message=finding.message,
        raw=f"{finding.kind} on {subject} since {onset}", pci=pci, gpu_uuid=gpu_uuid, category=finding.category,
        immediate_action=finding.action, investigatory_action=finding.investigatory,
        description=finding.description, mnemonic=finding.mnemonic,
        details={"onset": onset, **finding.details},
    )
