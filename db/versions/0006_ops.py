"""operator switches (current set and append-only history); dead-letter replays

`ops_switches`: the incident levers in force, one row per (kind, tenant, target); "" stands for
every tenant or no target. A lever turned off is deleted from here. `ops_switch_history`: every
change (set or cleared) with who, why and when; rows are only ever inserted.

`dead_letter_replays`: a dead letter that was replayed moves here (its `dead_letters` row is
deleted in the same transaction as the guarded FAILED -> RUNNING update), so a second replay of
it finds nothing to do and the task can be dead-lettered again later.

`ix_effects_tool_created`: the incident query "every task that used tool X in a window".

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ops_switches",
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(63), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("value", JSON, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("changed_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("kind", "tenant_id", "target", name="pk_ops_switches"),
    )
    op.create_table(
        "ops_switch_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(63), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("value", JSON),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ops_switch_history"),
    )
    op.create_index("ix_ops_switch_history_at", "ops_switch_history", ["at"])
    op.create_table(
        "dead_letter_replays",
        sa.Column("task_id", sa.String(40), nullable=False),
        sa.Column("dead_lettered_at", TS, nullable=False),
        sa.Column("tenant_id", sa.String(63), nullable=False),
        sa.Column("workflow", sa.String(80), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("replayed_by", sa.String(255), nullable=False),
        sa.Column("why", sa.String(1000), nullable=False),
        sa.Column("replayed_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name="fk_dead_letter_replays_task_id_tasks",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", "dead_lettered_at", name="pk_dead_letter_replays"),
    )
    op.create_index("ix_effects_tool_created", "effects", ["tool", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_effects_tool_created", table_name="effects")
    op.drop_table("dead_letter_replays")
    op.drop_index("ix_ops_switch_history_at", table_name="ops_switch_history")
    op.drop_table("ops_switch_history")
    op.drop_table("ops_switches")
