"""finished tasks by when they finished: the archive sweeper's partial index

The archive sweeper prunes finished tasks past their retention, oldest first; this index holds
only finished tasks, so the prune reads what it removes and no sweeper of live work (whose
indexes hold no finished task) grows with the history.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

WHERE = sa.text("status IN ('CANCELLED', 'COMPLETED', 'ESCALATED', 'FAILED')")


def upgrade() -> None:
    op.create_index(
        "ix_tasks_finished", "tasks", ["updated_at"], postgresql_where=WHERE, sqlite_where=WHERE
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_finished", table_name="tasks")
