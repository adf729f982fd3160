"""The tables of DESIGN.md, as SQLAlchemy Core metadata. Alembic migrations in `db/` create them.

Every sweeper query has a partial index whose predicate matches the query, so a sweep costs what
is due, not what the table holds (invariant 10): finished tasks never enter those indexes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from agent_jobs.core.identity import principal
from agent_jobs.core.states import PARKED, RUNNABLE, TERMINAL, Status
from agent_jobs.store.types import JsonType, StateJsonType, UTCDateTime

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _in(statuses: frozenset[Status] | set[Status]) -> str:
    return "(" + ", ".join(f"'{s.value}'" for s in sorted(statuses)) + ")"


ALL_STATUSES = _in(set(Status))
# Runnable tasks that a step message should exist for while they hold no lease.
DISPATCHABLE = _in({Status.RECEIVED, Status.RUNNING, Status.VERIFYING})
ACTIVE = _in(set(RUNNABLE) | set(PARKED))


def columns_sql(table: Table, qualifier: str = "") -> str:
    """`table`'s columns named in order, for hand-written SQL (never `*`: a column a migration
    adds lands at the end of the table), each prefixed with `qualifier.` if given."""
    prefix = f"{qualifier}." if qualifier else ""
    return ", ".join(prefix + c.name for c in table.c)


def _partial(where: str) -> dict[str, object]:
    clause = text(where)
    return {"postgresql_where": clause, "sqlite_where": clause}


tasks = Table(
    "tasks",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(63), nullable=False),
    Column("idempotency_key", String(255), nullable=False),
    Column("payload_hash", String(80), nullable=False),
    Column("workflow", String(80), nullable=False),
    Column("requester", String(255), nullable=False),
    Column("input", JsonType, nullable=False),
    # Versions the task is pinned to when it starts (workflow, prompt, model route, tool schemas).
    # Policy is deliberately re-read at decision time and again on resume.
    Column("pinned", JsonType, nullable=False),
    Column("status", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", UTCDateTime()),
    Column("lease_epoch", Integer, nullable=False),
    # Timer kept in the database (invariant 6): retry due time, approval expiry, reconcile backoff.
    Column("next_attempt_at", UTCDateTime()),
    # When a step message was last published for this task (the dispatch record, set in the same
    # transaction as the status it dispatches): how the sweeper finds a lost dispatch.
    Column("dispatched_at", UTCDateTime()),
    Column("attempts", Integer, nullable=False),
    # Held at the dispatch gate (a tenant at its concurrency cap or out of its fair share, or
    # the global model-call cap saturated): runnable, but deliberately without a step message,
    # so it occupies no worker. Released by the gate's pump, oldest first.
    Column("held_since", UTCDateTime()),
    Column("held_for", String(16)),
    Column("cancel_requested_at", UTCDateTime()),
    Column("state", StateJsonType, nullable=False),
    Column("outcome", JsonType),
    Column("event_seq", Integer, nullable=False),
    Column("trace_id", String(32), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # The class and message of the last step that raised (a failed attempt); cleared when a
    # step makes progress again (attempts back to 0). Added by migration 0005: last column.
    Column("last_error", Text),
    UniqueConstraint("tenant_id", "idempotency_key"),
    CheckConstraint(f"status IN {ALL_STATUSES}", name="status"),
    Index("ix_tasks_tenant_created", "tenant_id", "created_at"),
    Index(
        "ix_tasks_lease_expiry",
        "lease_expires_at",
        **_partial("lease_expires_at IS NOT NULL"),  # type: ignore[arg-type]
    ),
    Index(
        "ix_tasks_dispatch",
        # Keyed on created_at, which never changes: a read step then changes no indexed
        # column and Postgres can update the row in place (HOT). See migration 0004.
        "created_at",
        **_partial(  # type: ignore[arg-type]
            f"status IN {DISPATCHABLE} AND lease_owner IS NULL AND held_since IS NULL"
        ),
    ),
    Index(
        "ix_tasks_retry_due",
        "next_attempt_at",
        **_partial("status = 'RETRY_WAIT'"),  # type: ignore[arg-type]
    ),
    Index(
        "ix_tasks_approval_due",
        "next_attempt_at",
        **_partial("status = 'APPROVAL_WAIT'"),  # type: ignore[arg-type]
    ),
    Index(
        "ix_tasks_unknown_due",
        "next_attempt_at",
        **_partial("status = 'EXEC_UNKNOWN' AND lease_owner IS NULL"),  # type: ignore[arg-type]
    ),
    Index(
        "ix_tasks_held",
        "held_for",
        "tenant_id",
        "held_since",
        **_partial("held_since IS NOT NULL"),  # type: ignore[arg-type]
    ),
    # Finished tasks, oldest first: what the archive sweeper prunes (migration 0009). Keyed on
    # created_at, which never changes, not on updated_at, which every step changes: an index on
    # it would rule out in-place (HOT) updates for every step. No other sweeper's index holds a
    # finished task.
    Index(
        "ix_tasks_finished",
        "created_at",
        **_partial(f"status IN {_in(TERMINAL)}"),  # type: ignore[arg-type]
    ),
    Index(
        "ix_tasks_active_tenant",
        "tenant_id",
        **_partial(f"status IN {ACTIVE}"),  # type: ignore[arg-type]
    ),
)

task_events = Table(
    "task_events",
    metadata,
    Column("task_id", String(40), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", String(64), nullable=False),
    Column("from_status", String(16)),
    Column("to_status", String(16)),
    Column("data", JsonType, nullable=False),
    Column("trace_id", String(32), nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("task_id", "seq"),
)

effects = Table(
    "effects",
    metadata,
    Column("task_id", String(40), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("idempotency_key", String(255), nullable=False),
    Column("tool", String(128), nullable=False),
    Column("tool_version", String(32), nullable=False),
    Column("action_hash", String(80), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("result", JsonType),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("task_id", "idempotency_key"),
    CheckConstraint("status IN ('intent', 'committed', 'unknown', 'failed')", name="status"),
)


def _requester_principal(context: Any) -> str:
    """Filled in for any insert that does not name it (bench data, tests' seeds)."""
    return principal(context.get_current_parameters()["requester"])


approvals = Table(
    "approvals",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("task_id", String(40), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("tenant_id", String(63), nullable=False),
    Column("tool", String(128), nullable=False),
    Column("tool_version", String(32), nullable=False),
    Column("args", JsonType, nullable=False),
    Column("action_hash", String(80), nullable=False),
    Column("policy_version", String(64), nullable=False),
    Column("requester", String(255), nullable=False),
    Column("approver", String(255)),
    Column("status", String(16), nullable=False),
    Column("reason", String(500), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("decided_at", UTCDateTime()),
    Column("used_at", UTCDateTime()),
    # `core.identity.principal` of each subject: what "the same person" means, for the database
    # as for the code (migration 0005).
    Column("requester_principal", String(255), nullable=False, default=_requester_principal),
    Column("approver_principal", String(255)),
    # The head approval's id for the rows one person decides together (a plan of effects,
    # migration 0014); NULL for an approval of one action.
    Column("group_id", String(40)),
    CheckConstraint(
        "status IN ('pending', 'granted', 'denied', 'expired', 'used', 'void')", name="status"
    ),
    # The approver is never the requester, enforced by the database as well as the code.
    CheckConstraint("approver IS NULL OR approver <> requester", name="not_self_approved"),
    CheckConstraint(
        "approver_principal IS NULL OR approver_principal <> requester_principal",
        name="not_self_approved_principal",
    ),
    Index("ix_approvals_tenant_status", "tenant_id", "status"),
    Index("ix_approvals_task", "task_id"),
    Index(
        "ix_approvals_open_expiry",
        "expires_at",
        **_partial("status IN ('pending', 'granted')"),  # type: ignore[arg-type]
    ),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("task_id", String(40), ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("tenant_id", String(63), nullable=False),
    Column("workflow", String(80), nullable=False),
    Column("reason", String(1000), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Index("ix_dead_letters_tenant_at", "tenant_id", "at"),
)

# Small named timestamps the runtime keeps: e.g. "broker_lost_before", the instant before which
# every step message must be presumed lost because the broker restarted without persistence.
marks = Table(
    "marks",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("at", UTCDateTime(), nullable=False),
)

# Keys the runtime signs with, made on first use and kept here, where every worker already reads:
# e.g. "step_rows", the HMAC key of the row a quick step's commit hands to the next step's
# message (queue/carried_rows.py). The broker never holds one.
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("secret", String(128), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

# Celery-native submissions that created nothing (missing or invalid token, bad request, key
# reused with another payload, rate limit): one row per broker message, with its reason, so a
# sender can find out why its task never appeared. Tenant and subject are filled only when the
# token was verified; `claimed_tenant` is what an unverified token said, for the investigator.
rejected_submissions = Table(
    "rejected_submissions",
    metadata,
    Column("id", String(80), primary_key=True),
    Column("via", String(16), nullable=False),
    Column("reason_code", String(64), nullable=False),
    Column("reason", String(500), nullable=False),
    Column("tenant_id", String(63)),
    Column("subject", String(255)),
    Column("claimed_tenant", String(63)),
    Column("idempotency_key", String(255)),
    Column("message_id", String(255)),
    Column("at", UTCDateTime(), nullable=False),
    Index("ix_rejected_submissions_at", "at"),
    Index("ix_rejected_submissions_tenant_at", "tenant_id", "at"),
)

# Operator switches in force (migration 0006): one row per (kind, tenant, target), "" meaning
# every tenant or no target. Turning a switch off deletes its row; `ops_switch_history` keeps
# every change with who, why and when, and is only ever inserted into.
ops_switches = Table(
    "ops_switches",
    metadata,
    Column("kind", String(32), nullable=False),
    Column("tenant_id", String(63), nullable=False),
    Column("target", String(128), nullable=False),
    Column("value", JsonType, nullable=False),
    Column("actor", String(255), nullable=False),
    Column("reason", String(1000), nullable=False),
    Column("changed_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("kind", "tenant_id", "target"),
)

ops_switch_history = Table(
    "ops_switch_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("tenant_id", String(63), nullable=False),
    Column("target", String(128), nullable=False),
    # NULL: the switch was cleared.
    Column("value", JsonType),
    Column("actor", String(255), nullable=False),
    Column("reason", String(1000), nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Index("ix_ops_switch_history_at", "at"),
)

# Dead letters that were replayed: the `dead_letters` row moves here in the transaction that
# resumes the task, so replaying it twice does nothing and the task may be dead-lettered again.
dead_letter_replays = Table(
    "dead_letter_replays",
    metadata,
    Column("task_id", String(40), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("dead_lettered_at", UTCDateTime(), nullable=False),
    Column("tenant_id", String(63), nullable=False),
    Column("workflow", String(80), nullable=False),
    Column("reason", String(1000), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("replayed_by", String(255), nullable=False),
    Column("why", String(1000), nullable=False),
    Column("replayed_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("task_id", "dead_lettered_at"),
)

# The incident query "every task that used tool X in a window" (migration 0006).
Index("ix_effects_tool_created", effects.c.tool, effects.c.created_at)

# -- releases (migration 0007) -----------------------------------------------------------------
# A manifest, stored once and never changed: what gets evaluated, rolled out and rolled back.
releases = Table(
    "releases",
    metadata,
    Column("release_id", String(63), primary_key=True),
    Column("workflow", String(80), nullable=False),
    Column("manifest", JsonType, nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    # NULL until `release eval` ran: "passed" / "failed", with the suite's summary.
    Column("eval_status", String(16)),
    Column("eval_summary", JsonType),
)

# What is live per workflow: the incumbent, and a candidate in shadow or canary.
release_rollouts = Table(
    "release_rollouts",
    metadata,
    Column("workflow", String(80), primary_key=True),
    Column("incumbent", String(63)),
    Column("candidate", String(63)),
    Column("mode", String(16), nullable=False),
    Column("traffic_percent", Integer, nullable=False),
    Column("updated_by", String(255), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    CheckConstraint("mode IN ('none', 'shadow', 'canary')", name="mode"),
    CheckConstraint("traffic_percent BETWEEN 0 AND 100", name="percent"),
)

# Per tenant: an explicit release (evals, a customer held back) and the rollout phase it is in.
release_tenants = Table(
    "release_tenants",
    metadata,
    Column("tenant_id", String(63), nullable=False),
    Column("workflow", String(80), nullable=False),
    Column("release_id", String(63)),
    Column("phase", String(32)),
    Column("evidence", JsonType),
    Column("updated_by", String(255), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "workflow"),
)

# Every create, eval, promotion, rollback, canary start and automatic revert: append-only.
release_history = Table(
    "release_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("workflow", String(80), nullable=False),
    Column("action", String(32), nullable=False),
    Column("release_id", String(63)),
    Column("actor", String(255), nullable=False),
    Column("reason", String(1000), nullable=False),
    Column("data", JsonType),
    Column("at", UTCDateTime(), nullable=False),
    Index("ix_release_history_workflow_at", "workflow", "at"),
)

# -- webhooks (migration 0013) -------------------------------------------------------------------
# A tenant's endpoints: where its events go and which types it wants. Disabled (never deleted
# by us) after failing for a day; the owner re-enables it.
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(63), nullable=False),
    Column("url", String(2048), nullable=False),
    Column("event_types", JsonType, nullable=False),
    Column("description", String(200), nullable=False),
    Column("failing_since", UTCDateTime()),
    Column("disabled_at", UTCDateTime()),
    Column("disabled_reason", String(300)),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Index("ix_webhook_endpoints_tenant", "tenant_id"),
)

# Signing secrets: several live at once during a rotation (each signs; receivers accept any).
webhook_secrets = Table(
    "webhook_secrets",
    metadata,
    Column("id", String(40), primary_key=True),
    Column(
        "endpoint_id",
        String(40),
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("secret", String(100), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    # NULL: current. Set by a rotation: the old secret keeps signing until then.
    Column("expires_at", UTCDateTime()),
    Index("ix_webhook_secrets_endpoint", "endpoint_id"),
)

# The outbox: one row per (event, endpoint), written in the transaction of the transition that
# caused it. `id` orders a task's events; `msg_id` is the `webhook-id` every retry and replay
# repeats, so receivers de-duplicate on it.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("msg_id", String(64), nullable=False, unique=True),
    Column(
        "endpoint_id",
        String(40),
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("tenant_id", String(63), nullable=False),
    Column("task_id", String(40)),
    Column("event_type", String(40), nullable=False),
    # The body exactly as signed and sent, so every attempt sends the same bytes.
    Column("body", Text, nullable=False),
    Column("status", String(12), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime()),
    Column("last_status", Integer),
    Column("last_error", String(300)),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("delivered_at", UTCDateTime()),
    Column("updated_at", UTCDateTime(), nullable=False),
    CheckConstraint("status IN ('pending', 'delivered', 'dead')", name="status"),
    # The sweeper's due deliveries, and the in-order check (an earlier pending one blocks).
    Index(
        "ix_webhook_deliveries_due",
        "next_attempt_at",
        **_partial("status = 'pending'"),  # type: ignore[arg-type]
    ),
    Index(
        "ix_webhook_deliveries_order",
        "endpoint_id",
        "task_id",
        "id",
        **_partial("status = 'pending'"),  # type: ignore[arg-type]
    ),
    Index("ix_webhook_deliveries_tenant", "tenant_id", "status", "id"),
)
