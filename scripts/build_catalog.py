#!/usr/bin/env python3
"""Build xidpipe's own Xid and SXid catalogs from the reference transcription of NVIDIA's catalog.

Usage: scripts/build_catalog.py REFERENCE_DIR

Reads `xid_catalog.tsv` and `sxid_catalog.tsv` from REFERENCE_DIR (one row per code, transcribed
from NVIDIA's "Analyzing Xid Errors with the Xid Catalog" and the Fabric Manager User Guide) and
writes `models/catalog/xid.tsv` and `models/catalog/sxid.tsv` with a provenance header, keeping
the columns xidpipe uses and deriving an initial category for each code by the rules below.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

CATALOG_VERSION = "2026.11-2"
OUT = Path(__file__).resolve().parent.parent / "models" / "catalog"
# What the last check against NVIDIA's newest published sources found (written into the headers).
XID_CHECK = (
    "2026-12 against the newest stored copy of NVIDIA's Xid catalog page: codes 1-172, none newer; "
    "Xid 154's recovery-action values from NVML's nvmlDeviceGpuRecoveryAction_t (0 NONE .. 7 SYSTEM_REBOOT, "
    "models.catalog.RECOVERY_ACTIONS); Xid 144-150 (NVLink5) take WORKFLOW_NVLINK5_ERR, no sub-code table is "
    "published"
)
SXID_CHECK = (
    "2026-12: severities as the Fabric Manager User Guide's fatal (D.5) and non-fatal (D.4) tables give them; "
    "no newer guide with other severities was found"
)

APP_LEVEL_ACTIONS = {"RESTART_APP", "IGNORE", "WORKFLOW_XID_45"}
RESET_LEVEL_ACTIONS = {"RESET_GPU", "RESTART_BM", "RESTART_VM", "CHECK_MECHANICALS", "WORKFLOW_XID_48"}
MEMORY_WORDS = ("ECC", "DBE", "DRAM", "SRAM", "RETIREMENT", "REMAP", "MEMORY")
# Codes whose category the rules alone get wrong, with the reason written into the catalog.
OVERRIDES = {
    45: ("application", "preemptive cleanup after an earlier error; NVIDIA's workflow follows the other Xid"),
    79: ("hardware", "GPU has fallen off the bus"),
    154: ("driver", "informational: the driver's GPU recovery action changed"),
    167: ("hardware", "PCIe fatal timeout: the GPU's link stopped answering"),
    169: ("hardware", "internal micro-controller (SEC2) halt, as Xid 62 for the PMU"),
}


def category(code: int, row: dict[str, str]) -> tuple[str, str]:
    if code in OVERRIDES:
        return OVERRIDES[code]
    mnemonic, desc = row["mnemonic"].upper(), row["description"]
    action, causes = row["immediate_action"], set(filter(None, row["old_table_causes"].split("|")))
    if desc == "Unused":
        return "unknown", "code unused by current drivers"
    if "NVLINK" in mnemonic or "C2C" in mnemonic or action.startswith("WORKFLOW_NVLINK") or code in (136,):
        return "interconnect", "NVLink/C2C link error"
    if any(w in desc.lower() for w in ("thermal", "temperature", "power smoothing")):
        return "thermal", "thermal or power delivery condition"
    if "USER_APP" in causes and action in APP_LEVEL_ACTIONS:
        return "application", f"NVIDIA action {action}; causes include the user application"
    if any(w in mnemonic or w in desc.upper() for w in MEMORY_WORDS) or (
        "HW" in causes and (action in RESET_LEVEL_ACTIONS or action == "CONTACT_SUPPORT")
    ):
        return "hardware", f"NVIDIA action {action}; causes include hardware"
    if causes & {"DRIVER"} or action in {"UPDATE_SWFW", "CHECK_UVM"}:
        return "driver", f"NVIDIA action {action}; causes point at the driver or firmware"
    if action in RESET_LEVEL_ACTIONS or action == "CONTACT_SUPPORT":
        return "hardware", f"NVIDIA action {action}"
    if action in APP_LEVEL_ACTIONS:
        return "application", f"NVIDIA action {action}: restarting the application (or nothing) recovers"
    return "unknown", "no published action or cause"


def main(ref: Path) -> None:
    rows = list(csv.DictReader((ref / "xid_catalog.tsv").open(encoding="utf-8"), delimiter="\t"))
    with (OUT / "xid.tsv").open("w", encoding="utf-8", newline="") as out:
        out.write(
            f"# catalog_version: {CATALOG_VERSION}\n"
            "# source: NVIDIA, Analyzing Xid Errors with the Xid Catalog "
            "(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) and its archive page; "
            "category derived by scripts/build_catalog.py\n"
            f"# checked: {XID_CHECK}\n"
        )
        w = csv.writer(out, delimiter="\t", lineterminator="\n")
        w.writerow(["code", "mnemonic", "description", "immediate_action", "investigatory_action",
                    "category", "category_reason"])
        for row in rows:
            code = int(row["code"])
            cat, why = category(code, row)
            immediate = row["immediate_action"].strip()
            if immediate.startswith("("):
                immediate = ""
            w.writerow([code, row["mnemonic"].strip(), row["description"].strip(), immediate,
                        row["investigatory_action"].strip(), cat, why])
    srows = list(csv.DictReader((ref / "sxid_catalog.tsv").open(encoding="utf-8"), delimiter="\t"))
    with (OUT / "sxid.tsv").open("w", encoding="utf-8", newline="") as out:
        out.write(
            f"# catalog_version: {CATALOG_VERSION}\n"
            "# source: NVIDIA Fabric Manager User Guide DU-09883-001 (sections D.4-D.7), "
            "NVSwitch SXid codes; every SXid is categorised interconnect\n"
            f"# checked: {SXID_CHECK}\n"
        )
        w = csv.writer(out, delimiter="\t", lineterminator="\n")
        w.writerow(["code", "name", "fatal", "class"])
        for row in srows:
            klass = row["class"].strip()
            low = klass.lower()
            fatal = "fatal" if ("fatal" in low and not low.startswith(("non-fatal", "other notable"))) else "non-fatal"
            w.writerow([int(row["sxid"]), row["name"].strip(), fatal, klass])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
