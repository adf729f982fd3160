"""approval groups: one person's decision over a plan of several effects

An agent declared with `approve_plan=True` asks one approval for the effects of a plan together.
Each effect still has its own `approvals` row (bound to its own action hash, used once); the rows
of one decision share `group_id`, the id of the row its task waits on (the group's head). NULL for
an approval of one action. Queries for a group name its task too, so `ix_approvals_task` serves
them and no index is added.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("group_id", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_column("group_id")
