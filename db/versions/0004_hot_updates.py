"""let read steps be HOT updates: key the dispatch index on created_at; fillfactor 80

A RUNNING -> RUNNING step changes no indexed column once `ix_tasks_dispatch` stops indexing
`dispatched_at` (its predicate stays: status, lease_owner, held_since), so Postgres can update the
row in place on its page without touching any index, given room on the page (fillfactor).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

WHERE = sa.text(
    "status IN ('RECEIVED', 'RUNNING', 'VERIFYING') AND lease_owner IS NULL AND held_since IS NULL"
)


def upgrade() -> None:
    op.drop_index("ix_tasks_dispatch", table_name="tasks")
    op.create_index(
        "ix_tasks_dispatch", "tasks", ["created_at"], postgresql_where=WHERE, sqlite_where=WHERE
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE tasks SET (fillfactor = 80)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE tasks RESET (fillfactor)")
    op.drop_index("ix_tasks_dispatch", table_name="tasks")
    op.create_index(
        "ix_tasks_dispatch", "tasks", ["dispatched_at"], postgresql_where=WHERE, sqlite_where=WHERE
    )
