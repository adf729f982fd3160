"""key the archive's index of finished tasks on created_at: read steps are HOT updates again

Migration 0008 keyed `ix_tasks_finished` on `updated_at`, which every transition changes: with
any index on it, Postgres can no longer update a task row in place (HOT, see 0004), so every
step wrote an entry into each of the table's indexes. Keyed on `created_at`, which never changes,
the index is only touched when a task finishes (its status enters the predicate). The archive
sweeper still selects by when a task finished (`updated_at`, read from the row), in creation
order.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

WHERE = sa.text("status IN ('CANCELLED', 'COMPLETED', 'ESCALATED', 'FAILED')")


def upgrade() -> None:
    op.drop_index("ix_tasks_finished", table_name="tasks")
    op.create_index(
        "ix_tasks_finished", "tasks", ["created_at"], postgresql_where=WHERE, sqlite_where=WHERE
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_finished", table_name="tasks")
    op.create_index(
        "ix_tasks_finished", "tasks", ["updated_at"], postgresql_where=WHERE, sqlite_where=WHERE
    )
