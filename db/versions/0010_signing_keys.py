"""signing keys the runtime makes on first use (the step snapshots' HMAC key)

A quick step's commit returns the task's new row; when the next step is quick too, that row rides
in the next step's message, signed, so the next step needs no read. The key lives in the database
every worker already trusts, never in the broker.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signing_keys",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_signing_keys"),
    )


def downgrade() -> None:
    op.drop_table("signing_keys")
