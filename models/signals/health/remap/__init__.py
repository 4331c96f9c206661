"""Memory repair: row remapping (Ampere and later) and page retirement (earlier GPUs).

- remap pending: a row waits for its remapping, done at the next GPU reset; work may continue
  meanwhile: reset at the next opportunity (DCGM_FR_UNCORRECTABLE_ROW_REMAP; gpud: reboot).
- remap failure: the bank has no spare row left: the GPU is due for RMA (DCGM fails it; gpud:
  hardware inspection). Xid 64 is the driver's report of it.
- retired pages pending: a page waits for its retirement at the next reset (DCGM_FR_PENDING_PAGE_RETIREMENTS).
- retired pages at `retired_pages_max`: RMA (DCGM_FR_RETIRED_PAGES_LIMIT).

Their family is memory, so each joins the Xid 63/64 (or 48) occurrence of its GPU that it comes with.
"""

from __future__ import annotations

from datetime import datetime

from models.signals.finding import Finding
from models.signals.health.records import GpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction, InvestigatoryAction


def _onset(rec: GpuHealth, condition: str) -> datetime:
    return rec.since.get(condition, rec.observed_at)


def check(rec: GpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    r = rec.reading
    out: list[Finding] = []
    rows = r.remapped_rows
    if rows is not None and rows.failure:
        out.append(Finding(
            "row_remap_failure", Family.MEMORY, Category.HARDWARE,
            f"row remapping failed ({rows.uncorrectable} rows remapped for uncorrectable errors, "
            f"{rows.correctable} for correctable): no spare row left, the GPU is due for RMA",
            _onset(rec, "remap_failure"), ImmediateAction.CONTACT_SUPPORT, InvestigatoryAction.CONTACT_SUPPORT,
            "GPU memory row remapping failure", details={"remapped_rows": rows.model_dump()}))
    elif rows is not None and rows.pending:
        out.append(Finding(
            "row_remap_pending", Family.MEMORY, Category.HARDWARE,
            f"a row remapping is pending ({rows.uncorrectable} uncorrectable, {rows.correctable} correctable "
            "rows remapped): reset the GPU at the next opportunity; work may continue until then",
            _onset(rec, "remap_pending"), ImmediateAction.RESET_GPU, None,
            "GPU memory row remapping pending a reset", details={"remapped_rows": rows.model_dump()}))
    pages = None if r.retired_sbe is None and r.retired_dbe is None else (r.retired_sbe or 0) + (r.retired_dbe or 0)
    if pages is not None and pages >= policy.retired_pages_max:
        out.append(Finding(
            "retired_pages_limit", Family.MEMORY, Category.HARDWARE,
            f"{pages} pages retired ({r.retired_sbe or 0} single-bit, {r.retired_dbe or 0} double-bit), at or "
            f"above {policy.retired_pages_max}: the GPU is due for RMA",
            _onset(rec, "retired_pages"), ImmediateAction.CONTACT_SUPPORT, InvestigatoryAction.CONTACT_SUPPORT,
            "GPU memory page retirement limit", details={"retired_pages": pages}))
    elif r.retired_pending:
        out.append(Finding(
            "retired_pages_pending", Family.MEMORY, Category.HARDWARE,
            f"a page retirement is pending ({pages or 0} pages retired): reset the GPU at the next opportunity",
            _onset(rec, "retired_pending"), ImmediateAction.RESET_GPU, None,
            "GPU memory page retirement pending a reset", details={"retired_pages": pages}))
    return tuple(out)
