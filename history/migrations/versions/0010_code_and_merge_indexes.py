"""incident codes by code, incidents by the incident they were merged into

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

The history's code filter (`xidpipe incidents list --xid`, the API's `xid`) names a code as it is
shown, an Xid or an SXid (`SXid 12028` has no Xid number, so `(xid, incident_id)` cannot find it):
`incident_codes` is indexed by `(code, incident_id)`. An incident merged into another (a job's
faults found to stay with a GPU) keeps its own codes and namespaces, and the filters find the
incident it was merged into through it: `incidents` is indexed by `merged_into`.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incident_codes", schema=None) as batch_op:
        batch_op.create_index("ix_incident_codes_code_incident", ["code", "incident_id"], unique=False)
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.create_index("ix_incidents_merged_into", ["merged_into"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_index("ix_incidents_merged_into")
    with op.batch_alter_table("incident_codes", schema=None) as batch_op:
        batch_op.drop_index("ix_incident_codes_code_incident")
