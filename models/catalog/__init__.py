"""xidpipe's own Xid and SXid catalog, loaded from the bundled TSV files beside this module.

The files carry a provenance header (`# catalog_version:` and `# source:`); they are written by
`scripts/build_catalog.py` from the transcription of NVIDIA's published catalog. A category or an
action the vocabulary (`models.vocabulary`) does not name is refused when the catalog is loaded.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import TypeVar

from models.vocabulary import CATALOG_CATEGORIES, Category, ImmediateAction, InvestigatoryAction

_Name = TypeVar("_Name", bound=StrEnum)

# The values behind Xid 154 ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
# Required)"): NVML's nvmlDeviceGpuRecoveryAction_t, as the driver numbers them.
RECOVERY_ACTIONS = {
    0: "NONE",  # no action needed
    1: "GPU_RESET",  # reset the GPU
    2: "NODE_REBOOT",  # reboot the node
    3: "DRAIN_P2P",  # drain peer-to-peer traffic
    4: "DRAIN_AND_RESET",  # drain peer-to-peer traffic, then reset the GPU
    5: "RECOVER_IMEX_DOMAIN",  # recover the IMEX domain
    6: "BUS_RESET",  # reset the GPU's PCIe bus
    7: "SYSTEM_REBOOT",  # reboot the system
}


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    immediate_action: ImmediateAction | None
    investigatory_action: InvestigatoryAction | None
    category: Category
    category_reason: str


@dataclass(frozen=True, slots=True)
class SxidInfo:
    code: int
    name: str
    fatal: bool
    klass: str


@dataclass(frozen=True, slots=True)
class Catalog:
    version: str
    xids: dict[int, XidInfo]
    sxids: dict[int, SxidInfo]

    def xid(self, code: int) -> XidInfo | None:
        return self.xids.get(code)

    def sxid(self, code: int) -> SxidInfo | None:
        return self.sxids.get(code)


def _read(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    header: dict[str, str] = {}
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            key, _, value = line[1:].partition(":")
            header[key.strip()] = value.strip()
        elif line:
            body.append(line)
    return header, list(csv.DictReader(body, delimiter="\t"))


@cache
def load_catalog() -> Catalog:
    """The bundled catalog (parsed once per process)."""
    xhead, xrows = _read("xid.tsv")
    shead, srows = _read("sxid.tsv")
    version = xhead["catalog_version"]
    if shead.get("catalog_version") != version:
        raise ValueError("xid.tsv and sxid.tsv carry different catalog versions")
    xids = {int(r["code"]): parse_xid_row(r) for r in xrows}
    sxids = {
        int(r["code"]): SxidInfo(code=int(r["code"]), name=r["name"], fatal=r["fatal"] == "fatal", klass=r["class"])
        for r in srows
    }
    return Catalog(version=version, xids=xids, sxids=sxids)


def parse_xid_row(r: dict[str, str]) -> XidInfo:
    """One row of xid.tsv; a category or an action the vocabulary does not name is refused."""
    code = int(r["code"])
    category = _named(Category, r["category"], code, "category")
    if category is None or category not in CATALOG_CATEGORIES:
        raise ValueError(f"xid.tsv: Xid {code}: category {r['category']!r} is not one the catalog assigns "
                         f"({', '.join(CATALOG_CATEGORIES)})")
    return XidInfo(
        code=code,
        mnemonic=r["mnemonic"],
        description=r["description"],
        immediate_action=_named(ImmediateAction, r["immediate_action"], code, "immediate action"),
        investigatory_action=_named(InvestigatoryAction, r["investigatory_action"], code, "investigatory action"),
        category=category,
        category_reason=r["category_reason"],
    )


def _named(names: type[_Name], text: str, code: int, what: str) -> _Name | None:
    """The vocabulary's member for a column's text (None for an empty column)."""
    if not text:
        return None
    try:
        return names(text)
    except ValueError:
        raise ValueError(f"xid.tsv: Xid {code}: unknown {what} {text!r}; add it to models.vocabulary."
                         f"{names.__name__} if NVIDIA's catalog now names it") from None
