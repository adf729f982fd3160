"""releases: manifests, what is live per workflow, per-tenant pins and phases, history

`releases`: stored manifests (never updated, except the result of their evaluation).
`release_rollouts`: per workflow, the incumbent and a candidate in shadow or canary.
`release_tenants`: a tenant's explicit release and rollout phase (with the gate's evidence).
`release_history`: append-only audit of every create, eval, promotion, rollback and revert.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "releases",
        sa.Column("release_id", sa.String(63), nullable=False),
        sa.Column("workflow", sa.String(80), nullable=False),
        sa.Column("manifest", JSON, nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("eval_status", sa.String(16)),
        sa.Column("eval_summary", JSON),
        sa.PrimaryKeyConstraint("release_id", name="pk_releases"),
    )
    op.create_table(
        "release_rollouts",
        sa.Column("workflow", sa.String(80), nullable=False),
        sa.Column("incumbent", sa.String(63)),
        sa.Column("candidate", sa.String(63)),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("traffic_percent", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("workflow", name="pk_release_rollouts"),
        sa.CheckConstraint(
            "mode IN ('none', 'shadow', 'canary')", name=op.f("ck_release_rollouts_mode")
        ),
        sa.CheckConstraint(
            "traffic_percent BETWEEN 0 AND 100", name=op.f("ck_release_rollouts_percent")
        ),
    )
    op.create_table(
        "release_tenants",
        sa.Column("tenant_id", sa.String(63), nullable=False),
        sa.Column("workflow", sa.String(80), nullable=False),
        sa.Column("release_id", sa.String(63)),
        sa.Column("phase", sa.String(32)),
        sa.Column("evidence", JSON),
        sa.Column("updated_by", sa.String(255), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "workflow", name="pk_release_tenants"),
    )
    op.create_table(
        "release_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workflow", sa.String(80), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("release_id", sa.String(63)),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("data", JSON),
        sa.Column("at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_release_history"),
    )
    op.create_index("ix_release_history_workflow_at", "release_history", ["workflow", "at"])


def downgrade() -> None:
    op.drop_index("ix_release_history_workflow_at", table_name="release_history")
    op.drop_table("release_history")
    op.drop_table("release_tenants")
    op.drop_table("release_rollouts")
    op.drop_table("releases")
