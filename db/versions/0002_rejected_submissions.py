"""rejected submissions

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Celery-native submissions that created nothing, with the reason (same on both backends).
    op.create_table(
        "rejected_submissions",
        sa.Column("id", sa.String(length=80), nullable=False),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("tenant_id", sa.String(length=63), nullable=True),
        sa.Column("subject", sa.String(length=255), nullable=True),
        sa.Column("claimed_tenant", sa.String(length=63), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("message_id", sa.String(length=255), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rejected_submissions")),
    )
    with op.batch_alter_table("rejected_submissions", schema=None) as batch_op:
        batch_op.create_index("ix_rejected_submissions_at", ["at"], unique=False)
        batch_op.create_index(
            "ix_rejected_submissions_tenant_at", ["tenant_id", "at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("rejected_submissions", schema=None) as batch_op:
        batch_op.drop_index("ix_rejected_submissions_tenant_at")
        batch_op.drop_index("ix_rejected_submissions_at")

    op.drop_table("rejected_submissions")
