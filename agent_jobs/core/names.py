"""Every queue name and Redis key, built in one place."""

from __future__ import annotations

# The Celery task that runs one step of one task (queue/tasks.py); its messages are what the
# publisher sends and what the step acks (queue/step_acks.py) recognise.
STEP_TASK = "agent_jobs.step"
# The Celery task that makes one attempt at one webhook delivery (notify/), on the tenant's queue.
DELIVER_TASK = "agent_jobs.deliver"


def tenant_queue(prefix: str, tenant_id: str) -> str:
    """A tenant's own Celery queue: `aj.t.<tenant>` (tenant ids are restricted to [a-z0-9_.-])."""
    return f"{prefix}.t.{tenant_id}"


def tenant_of_queue(prefix: str, queue: str) -> str | None:
    head = f"{prefix}.t."
    return queue[len(head) :] if queue.startswith(head) else None


def shared_queue(prefix: str) -> str:
    """The one queue of AGENT_JOBS_ROUTING=shared (a benchmark baseline, not a deployment)."""
    return f"{prefix}.shared"


def control_queue(prefix: str) -> str:
    """Where beat sends the sweepers; every worker consumes it."""
    return f"{prefix}.control"


def submit_queue(prefix: str) -> str:
    """Where other services' `send_task("agent_jobs.submit", ...)` messages arrive."""
    return f"{prefix}.submit"


def ready_queue(prefix: str) -> str:
    """The queue a worker consumes to be served every tenant's queue through the ready ring
    (queue/ready_ring.py). It has no list of its own: its messages come from the tenants'."""
    return f"{prefix}.ready"


def ready_ring_key(prefix: str) -> str:
    """Redis list: the tenant queues that hold a message, each once, in the order served."""
    return f"{prefix}:ready:ring"


def ready_members_key(prefix: str) -> str:
    """Redis set: the tenant queues in the ready ring."""
    return f"{prefix}:ready:members"


def ready_doorbell_key(prefix: str) -> str:
    """Redis list: a token per published step (trimmed), which idle workers wait on."""
    return f"{prefix}:ready:doorbell"


def active_tenants_key(prefix: str) -> str:
    """Redis sorted set: tenant -> last dispatch (ms). Workers consume these tenants' queues."""
    return f"{prefix}:tenants:active"


def broker_sentinel_key(prefix: str) -> str:
    """A key in the broker's Redis; its absence means the broker lost everything."""
    return f"{prefix}:broker:sentinel"


def rate_bucket_key(prefix: str, tenant_id: str) -> str:
    return f"{prefix}:ratelimit:{tenant_id}"


def tenant_inflight_key(prefix: str, tenant_id: str) -> str:
    """Sorted set: a tenant's gate slots (task id -> expiry, ms)."""
    return f"{prefix}:gate:inflight:{tenant_id}"


def gate_vt_key(prefix: str) -> str:
    """Sorted set: backlogged tenants by virtual time (fair share)."""
    return f"{prefix}:gate:vt:backlogged"


def gate_vt_table_key(prefix: str) -> str:
    """Hash: every tenant's virtual time, kept while it is idle."""
    return f"{prefix}:gate:vt"


def gate_estimate_key(prefix: str) -> str:
    """Hash: tenant -> moving average of its step cost (s), the provisional charge on admit."""
    return f"{prefix}:gate:estimate"


def gate_provisional_key(prefix: str) -> str:
    """Hash: "tenant|slot member" -> the provisional charge made when it was admitted."""
    return f"{prefix}:gate:provisional"


def gate_held_key(prefix: str) -> str:
    """Hash: tenant -> tasks held at the gate (the pump's work list)."""
    return f"{prefix}:gate:held"


def model_semaphore_key(prefix: str) -> str:
    """Sorted set: model calls in flight across all workers (holder -> expiry, ms)."""
    return f"{prefix}:model:slots"


# A message header every agent_jobs publisher stamps (epoch seconds, float): how old the oldest
# message of a queue is, read at scrape time. Celery's own headers carry no send time.
ENQUEUED_AT_HEADER = "aj-enqueued-at"
# The `dispatch_uid` of its `before_task_publish` receiver (`obs.metrics.stamp_enqueued_at`).
ENQUEUED_AT_RECEIVER = "agent_jobs.enqueued_at"


def rejected_submission_id(message_id: str) -> str:
    """One record per rejected Celery message, however often the broker redelivers it."""
    return f"rej_{message_id}"[:80]


def ops_switches_channel(prefix: str) -> str:
    """Redis pub/sub channel: a message on it means "the operator switches changed, re-read"."""
    return f"{prefix}:ops:switches"
