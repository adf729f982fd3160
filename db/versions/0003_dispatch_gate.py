"""dispatch gate: tasks held without a step message (tenant caps, fair share, model cap)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

DISPATCHABLE = "status IN ('RECEIVED', 'RUNNING', 'VERIFYING') AND lease_owner IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("held_since", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("held_for", sa.String(length=16), nullable=True))
    # The lost-dispatch sweeper must not see held tasks: they have no message on purpose.
    op.drop_index("ix_tasks_dispatch", table_name="tasks")
    where = sa.text(f"{DISPATCHABLE} AND held_since IS NULL")
    op.create_index(
        "ix_tasks_dispatch", "tasks", ["dispatched_at"], postgresql_where=where, sqlite_where=where
    )
    held = sa.text("held_since IS NOT NULL")
    op.create_index(
        "ix_tasks_held",
        "tasks",
        ["held_for", "tenant_id", "held_since"],
        postgresql_where=held,
        sqlite_where=held,
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_held", table_name="tasks")
    op.drop_index("ix_tasks_dispatch", table_name="tasks")
    where = sa.text(DISPATCHABLE)
    op.create_index(
        "ix_tasks_dispatch", "tasks", ["dispatched_at"], postgresql_where=where, sqlite_where=where
    )
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("held_for")
        batch.drop_column("held_since")
