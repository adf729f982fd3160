"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# JSONB on Postgres, JSON (text) on SQLite: the same migration runs on both backends.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "marks",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_marks")),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=63), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("payload_hash", sa.String(length=80), nullable=False),
        sa.Column("workflow", sa.String(length=80), nullable=False),
        sa.Column("requester", sa.String(length=255), nullable=False),
        sa.Column("input", JSON, nullable=False),
        sa.Column("pinned", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_epoch", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", JSON, nullable=False),
        sa.Column("outcome", JSON, nullable=True),
        sa.Column("event_seq", sa.Integer(), nullable=False),
        sa.Column("trace_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('APPROVAL_WAIT', 'CANCELLED', 'COMPLETED', 'ESCALATED', 'EXECUTING', 'EXEC_UNKNOWN', 'FAILED', 'RECEIVED', 'RETRY_WAIT', 'RUNNING', 'VERIFYING')",
            name=op.f("ck_tasks_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint(
            "tenant_id", "idempotency_key", name=op.f("uq_tasks_tenant_id_idempotency_key")
        ),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tasks_active_tenant",
            ["tenant_id"],
            unique=False,
            postgresql_where=sa.text(
                "status IN ('APPROVAL_WAIT', 'EXECUTING', 'EXEC_UNKNOWN', 'RECEIVED', 'RETRY_WAIT', 'RUNNING', 'VERIFYING')"
            ),
            sqlite_where=sa.text(
                "status IN ('APPROVAL_WAIT', 'EXECUTING', 'EXEC_UNKNOWN', 'RECEIVED', 'RETRY_WAIT', 'RUNNING', 'VERIFYING')"
            ),
        )
        batch_op.create_index(
            "ix_tasks_approval_due",
            ["next_attempt_at"],
            unique=False,
            postgresql_where=sa.text("status = 'APPROVAL_WAIT'"),
            sqlite_where=sa.text("status = 'APPROVAL_WAIT'"),
        )
        batch_op.create_index(
            "ix_tasks_dispatch",
            ["dispatched_at"],
            unique=False,
            postgresql_where=sa.text(
                "status IN ('RECEIVED', 'RUNNING', 'VERIFYING') AND lease_owner IS NULL"
            ),
            sqlite_where=sa.text(
                "status IN ('RECEIVED', 'RUNNING', 'VERIFYING') AND lease_owner IS NULL"
            ),
        )
        batch_op.create_index(
            "ix_tasks_lease_expiry",
            ["lease_expires_at"],
            unique=False,
            postgresql_where=sa.text("lease_expires_at IS NOT NULL"),
            sqlite_where=sa.text("lease_expires_at IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_tasks_retry_due",
            ["next_attempt_at"],
            unique=False,
            postgresql_where=sa.text("status = 'RETRY_WAIT'"),
            sqlite_where=sa.text("status = 'RETRY_WAIT'"),
        )
        batch_op.create_index("ix_tasks_tenant_created", ["tenant_id", "created_at"], unique=False)
        batch_op.create_index(
            "ix_tasks_unknown_due",
            ["next_attempt_at"],
            unique=False,
            postgresql_where=sa.text("status = 'EXEC_UNKNOWN' AND lease_owner IS NULL"),
            sqlite_where=sa.text("status = 'EXEC_UNKNOWN' AND lease_owner IS NULL"),
        )

    op.create_table(
        "approvals",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=63), nullable=False),
        sa.Column("tool", sa.String(length=128), nullable=False),
        sa.Column("tool_version", sa.String(length=32), nullable=False),
        sa.Column("args", JSON, nullable=False),
        sa.Column("action_hash", sa.String(length=80), nullable=False),
        sa.Column("policy_version", sa.String(length=64), nullable=False),
        sa.Column("requester", sa.String(length=255), nullable=False),
        sa.Column("approver", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'granted', 'denied', 'expired', 'used', 'void')",
            name=op.f("ck_approvals_status"),
        ),
        sa.CheckConstraint(
            "approver IS NULL OR approver <> requester", name=op.f("ck_approvals_not_self_approved")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_approvals_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
    )
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.create_index(
            "ix_approvals_open_expiry",
            ["expires_at"],
            unique=False,
            postgresql_where=sa.text("status IN ('pending', 'granted')"),
            sqlite_where=sa.text("status IN ('pending', 'granted')"),
        )
        batch_op.create_index("ix_approvals_task", ["task_id"], unique=False)
        batch_op.create_index("ix_approvals_tenant_status", ["tenant_id", "status"], unique=False)

    op.create_table(
        "dead_letters",
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=63), nullable=False),
        sa.Column("workflow", sa.String(length=80), nullable=False),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_dead_letters_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_dead_letters")),
    )
    with op.batch_alter_table("dead_letters", schema=None) as batch_op:
        batch_op.create_index("ix_dead_letters_tenant_at", ["tenant_id", "at"], unique=False)

    op.create_table(
        "effects",
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("tool", sa.String(length=128), nullable=False),
        sa.Column("tool_version", sa.String(length=32), nullable=False),
        sa.Column("action_hash", sa.String(length=80), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("result", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('intent', 'committed', 'unknown', 'failed')", name=op.f("ck_effects_status")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_effects_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", "idempotency_key", name=op.f("pk_effects")),
    )
    op.create_table(
        "task_events",
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("data", JSON, nullable=False),
        sa.Column("trace_id", sa.String(length=32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_events_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", "seq", name=op.f("pk_task_events")),
    )


def downgrade() -> None:
    op.drop_table("task_events")
    op.drop_table("effects")
    with op.batch_alter_table("dead_letters", schema=None) as batch_op:
        batch_op.drop_index("ix_dead_letters_tenant_at")

    op.drop_table("dead_letters")
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index("ix_approvals_tenant_status")
        batch_op.drop_index("ix_approvals_task")
        batch_op.drop_index(
            "ix_approvals_open_expiry",
            postgresql_where=sa.text("status IN ('pending', 'granted')"),
            sqlite_where=sa.text("status IN ('pending', 'granted')"),
        )

    op.drop_table("approvals")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_tasks_unknown_due",
            postgresql_where=sa.text("status = 'EXEC_UNKNOWN' AND lease_owner IS NULL"),
            sqlite_where=sa.text("status = 'EXEC_UNKNOWN' AND lease_owner IS NULL"),
        )
        batch_op.drop_index("ix_tasks_tenant_created")
        batch_op.drop_index(
            "ix_tasks_retry_due",
            postgresql_where=sa.text("status = 'RETRY_WAIT'"),
            sqlite_where=sa.text("status = 'RETRY_WAIT'"),
        )
        batch_op.drop_index(
            "ix_tasks_lease_expiry",
            postgresql_where=sa.text("lease_expires_at IS NOT NULL"),
            sqlite_where=sa.text("lease_expires_at IS NOT NULL"),
        )
        batch_op.drop_index(
            "ix_tasks_dispatch",
            postgresql_where=sa.text(
                "status IN ('RECEIVED', 'RUNNING', 'VERIFYING') AND lease_owner IS NULL"
            ),
            sqlite_where=sa.text(
                "status IN ('RECEIVED', 'RUNNING', 'VERIFYING') AND lease_owner IS NULL"
            ),
        )
        batch_op.drop_index(
            "ix_tasks_approval_due",
            postgresql_where=sa.text("status = 'APPROVAL_WAIT'"),
            sqlite_where=sa.text("status = 'APPROVAL_WAIT'"),
        )
        batch_op.drop_index(
            "ix_tasks_active_tenant",
            postgresql_where=sa.text(
                "status IN ('APPROVAL_WAIT', 'EXECUTING', 'EXEC_UNKNOWN', 'RECEIVED', 'RETRY_WAIT', 'RUNNING', 'VERIFYING')"
            ),
            sqlite_where=sa.text(
                "status IN ('APPROVAL_WAIT', 'EXECUTING', 'EXEC_UNKNOWN', 'RECEIVED', 'RETRY_WAIT', 'RUNNING', 'VERIFYING')"
            ),
        )

    op.drop_table("tasks")
    op.drop_table("marks")
