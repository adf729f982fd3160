"""webhooks: a tenant's endpoints, their signing secrets, and the delivery outbox

Each event (a task finished, an approval requested or about to expire, a task parked by a lever,
a dead letter) is written as one `webhook_deliveries` row per subscribed endpoint in the same
transaction as the transition that caused it; workers deliver them on the tenant's queue. Two
partial indexes keep the sweeper and the in-order check to the rows still pending.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
PENDING = sa.text("status = 'pending'")


def _ts(name: str, nullable: bool = True) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("tenant_id", sa.String(63), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("event_types", JSON, nullable=False),
        sa.Column("description", sa.String(200), nullable=False),
        _ts("failing_since"),
        _ts("disabled_at"),
        sa.Column("disabled_reason", sa.String(300)),
        _ts("created_at", nullable=False),
        _ts("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_endpoints"),
    )
    op.create_index("ix_webhook_endpoints_tenant", "webhook_endpoints", ["tenant_id"])
    op.create_table(
        "webhook_secrets",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("secret", sa.String(100), nullable=False),
        _ts("created_at", nullable=False),
        _ts("expires_at"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_secrets"),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["webhook_endpoints.id"],
            name="fk_webhook_secrets_endpoint_id_webhook_endpoints",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_webhook_secrets_endpoint", "webhook_secrets", ["endpoint_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("msg_id", sa.String(64), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("tenant_id", sa.String(63), nullable=False),
        sa.Column("task_id", sa.String(40)),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _ts("next_attempt_at"),
        sa.Column("last_status", sa.Integer()),
        sa.Column("last_error", sa.String(300)),
        _ts("created_at", nullable=False),
        _ts("delivered_at"),
        _ts("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.UniqueConstraint("msg_id", name="uq_webhook_deliveries_msg_id"),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["webhook_endpoints.id"],
            name="fk_webhook_deliveries_endpoint_id_webhook_endpoints",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'dead')", name="ck_webhook_deliveries_status"
        ),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.create_index(
        "ix_webhook_deliveries_order",
        "webhook_deliveries",
        ["endpoint_id", "task_id", "id"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.create_index(
        "ix_webhook_deliveries_tenant", "webhook_deliveries", ["tenant_id", "status", "id"]
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_secrets")
    op.drop_table("webhook_endpoints")
