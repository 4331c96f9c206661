"""gpu card claims: a card listed by a second node is a conflict, not a move

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

`gpu_cards.claimed_by` names the node whose inventory lists a card while the node it is placed on
still lists it (`models.ledger`: the card stays where it is, in state `conflict`, until its node stops
reporting it). Indexed: each inventory of a node loads the cards it claims.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_cards", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claimed_by", sa.String(length=253), nullable=True))
        batch_op.create_index("ix_gpu_cards_claimed_by", ["claimed_by"], unique=False)


def downgrade() -> None:
    op.execute("UPDATE gpu_cards SET state = 'in_service' WHERE state = 'conflict'")
    with op.batch_alter_table("gpu_cards", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_cards_claimed_by")
        batch_op.drop_column("claimed_by")
