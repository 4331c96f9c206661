"""What an NVML record reports, as fault observations: pure, with the catalog's recommendation.

- `observation_from_nvml`: a critical Xid (its catalog entry and family), a double-bit ECC error
  (`memory`), a GPU gone (`gpu_lost`), a recovery action (`recovery_action`); None for events that
  are not faults (single-bit ECC, MIG changes).
- `observation_from_missing`: a GPU missing from the device count (`gpu_lost`).
"""

from __future__ import annotations

from typing import Any

from models.catalog import Catalog, load_catalog
from models.families import family_of
from models.incidents import FaultObservation
from models.kernlog.record import FaultRecord
from models.signals.nvml.records import GpuMissing, NvmlEvent

_NVML_KINDS = {"double_bit_ecc": "ecc", "gpu_unavailable": "gpu_fallen_off_bus"}


def observation_from_nvml(event: NvmlEvent, catalog: Catalog | None = None) -> FaultObservation | None:
    """An NVML event that reports a fault; None for events that are not faults (single-bit ECC, MIG changes)."""
    cat = catalog or load_catalog()
    raw = event.model_dump_json()
    common: dict[str, Any] = {
        "node": event.node, "source": "nvml", "record_id": event.record_id, "occurred_at": event.observed_at,
        "raw": raw, "pci": event.pci_bus_id, "gpu_uuid": event.gpu_uuid,
        "gpu_instance_id": event.gpu_instance_id, "catalog_version": cat.version,
    }
    if event.event_type == "xid_critical" and event.xid is not None:
        info = cat.xid(event.xid)
        rec = FaultRecord(line=0, kind="xid", raw=raw, message="", xid=event.xid,
                          category=info.category if info else "unknown")
        return FaultObservation(
            **common, kind="xid", family=family_of(rec), message=info.description if info else f"Xid {event.xid}",
            xid=event.xid, mnemonic=info.mnemonic if info else None, category=rec.category,
            immediate_action=info.immediate_action if info else None,
            investigatory_action=info.investigatory_action if info else None,
            description=info.description if info else None,
        )
    kind = _NVML_KINDS.get(event.event_type)
    if kind is None and event.event_type == "recovery_action":
        return FaultObservation(**common, kind="driver_error", family="recovery_action",
                                message=f"GPU recovery action {event.event_data}", category="driver",
                                details={"recovery_action_new": event.event_data})
    if kind is None:
        return None
    family = "memory" if kind == "ecc" else "gpu_lost"
    return FaultObservation(**common, kind=kind, family=family, message=event.event_type.replace("_", " "),
                            category="hardware")


def observation_from_missing(rec: GpuMissing) -> FaultObservation:
    return FaultObservation(
        node=rec.node, source="nvml", record_id=rec.record_id, occurred_at=rec.observed_at, kind="gpu_missing",
        family="gpu_lost", message=f"GPU missing ({rec.reason}: {rec.observed_count}/{rec.expected_count} visible)",
        raw=rec.model_dump_json(), pci=rec.pci_bus_id, gpu_uuid=rec.gpu_uuid, category="hardware",
    )
