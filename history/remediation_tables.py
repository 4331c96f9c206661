"""SQL tables of the remediation loop (`respond.remediation`) and the GPU ledger's RMAs; no engine here.

- `remediation_loops`: one row per loop (one per xidpipe cordon of a node for an incident), its
  stage, the remedy under way, its attempt and validation counters, the operator's pause or cancel,
  a `version` every transition increments (a transition written by two responders at once lands once).
- `remediation_attempts`: one row per Job or hand-off the loop reserved (reset, reboot, bug report,
  validation), written before the Job is created: the budgets count these rows, and the Job's name
  in it is its idempotency key.
- `remediation_transitions`: each stage change with its reason, in order; `told_at` once its ticket
  comment and chat message were sent.
- `gpu_rma`: a card marked for RMA by a loop, open until a new card appears in its slot.

Migration 0010 creates them.
"""

from __future__ import annotations

import sqlalchemy as sa

from history.tables import UtcDateTime, metadata

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

remediation_loops_table = sa.Table(
    "remediation_loops",
    metadata,
    sa.Column("loop_id", sa.String(32), primary_key=True),
    sa.Column("incident_id", sa.String(512), nullable=False),
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("gpu", sa.String(128), nullable=False),
    sa.Column("card", sa.String(160), nullable=False),
    sa.Column("pool", sa.String(253), nullable=False),
    sa.Column("family", sa.String(32), nullable=False),
    sa.Column("cordoned_at", sa.String(64), nullable=False),
    sa.Column("stage", sa.String(16), nullable=False),
    sa.Column("remedy", sa.String(16)),
    sa.Column("via", sa.String(16)),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("validation", sa.Integer, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("paused_by", sa.String(253)),
    sa.Column("cancel_requested", sa.Text),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("boot_id", sa.String(64)),
    sa.Column("opened_at", UtcDateTime(timezone=True), nullable=False),
    sa.Column("stage_since", UtcDateTime(timezone=True), nullable=False),
    sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
    sa.Column("deadline_at", UtcDateTime(timezone=True), nullable=False),
    sa.Column("closed_at", UtcDateTime(timezone=True)),
    sa.Column("details", sa.JSON, nullable=False),
    sa.Index("ix_remediation_loops_stage", "stage", "opened_at"),
    sa.Index("ix_remediation_loops_node", "node", "opened_at"),
    sa.Index("ix_remediation_loops_incident", "incident_id"),
    sa.Index("ix_remediation_loops_card", "card", "opened_at"),
)

remediation_attempts_table = sa.Table(
    "remediation_attempts",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("loop_id", sa.String(32), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # reset_gpu, reboot_node, bug_report, validation
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("via", sa.String(16), nullable=False),  # job, hand_off
    sa.Column("job_name", sa.String(63), nullable=False),
    sa.Column("incident_id", sa.String(512), nullable=False),
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("card", sa.String(160), nullable=False),
    sa.Column("family", sa.String(32), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),  # in_flight, succeeded, failed, cancelled
    sa.Column("validated", sa.String(8)),  # passed, failed: what validation said of a reset or reboot
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("reserved_at", UtcDateTime(timezone=True), nullable=False),
    sa.Column("finished_at", UtcDateTime(timezone=True)),
    sa.Column("details", sa.JSON, nullable=False),
    sa.UniqueConstraint("loop_id", "kind", "seq", name="uq_remediation_attempts_key"),
    sa.Index("ix_remediation_attempts_node", "node", "reserved_at"),
    sa.Index("ix_remediation_attempts_card", "card", "reserved_at"),
)

remediation_transitions_table = sa.Table(
    "remediation_transitions",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("loop_id", sa.String(32), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),  # the loop's version once this transition was written
    sa.Column("incident_id", sa.String(512), nullable=False),
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("from_stage", sa.String(16)),
    sa.Column("to_stage", sa.String(16), nullable=False),
    sa.Column("at", UtcDateTime(timezone=True), nullable=False),
    sa.Column("actor", sa.String(253), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("told_at", UtcDateTime(timezone=True)),
    sa.UniqueConstraint("loop_id", "seq", name="uq_remediation_transitions_seq"),
    sa.Index("ix_remediation_transitions_incident", "incident_id", "at"),
    sa.Index("ix_remediation_transitions_untold", "told_at", "id"),
)

gpu_rma_table = sa.Table(
    "gpu_rma",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("card", sa.String(160), nullable=False),
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("pci_slot", sa.String(32), nullable=False),
    sa.Column("gpu_uuid", sa.String(128)),
    sa.Column("incident_id", sa.String(512), nullable=False),
    sa.Column("loop_id", sa.String(32), nullable=False),
    sa.Column("opened_at", UtcDateTime(timezone=True), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("closed_at", UtcDateTime(timezone=True)),
    sa.Column("replaced_by", sa.String(160)),
    sa.Column("close_reason", sa.Text),
    sa.UniqueConstraint("loop_id", name="uq_gpu_rma_loop"),
    sa.Index("ix_gpu_rma_card", "card", "closed_at"),
    sa.Index("ix_gpu_rma_slot", "node", "pci_slot"),
)
