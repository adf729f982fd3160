"""failed attempts on the task row; approvals compared by principal in the database

`tasks.last_error`: the class and message of the last step that raised (a failed attempt), so a
task parked by failures says why without reading its events.

`approvals.requester_principal` / `approver_principal`: the canonical identity of each subject
(`core.identity.principal`: NFKC, case-folded, spaces collapsed), written by the store. The
database's guard against self-approval compares these, so "Alice", " alice" and a full-width "Alice" are one
person at grant time, at use time and in the database alike.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("last_error", sa.Text()))
    op.add_column("approvals", sa.Column("requester_principal", sa.String(255)))
    op.add_column("approvals", sa.Column("approver_principal", sa.String(255)))
    # Rows from before: an approximation of principal() in SQL (NFKC is not available in
    # SQLite); every row written from now on is computed by principal() itself.
    op.execute("UPDATE approvals SET requester_principal = lower(trim(requester))")
    op.execute(
        "UPDATE approvals SET approver_principal = lower(trim(approver)) WHERE approver IS NOT NULL"
    )
    with op.batch_alter_table("approvals") as batch:
        batch.alter_column("requester_principal", existing_type=sa.String(255), nullable=False)
        batch.create_check_constraint(
            "ck_approvals_not_self_approved_principal",
            "approver_principal IS NULL OR approver_principal <> requester_principal",
        )


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_constraint("ck_approvals_not_self_approved_principal", type_="check")
        batch.drop_column("approver_principal")
        batch.drop_column("requester_principal")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("last_error")
