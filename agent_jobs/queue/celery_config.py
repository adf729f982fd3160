"""Celery settings for agent_jobs, derived from the `AGENT_JOBS_*` environment.

The app always loads this module; a module named by AGENT_JOBS_CELERY_CONFIG (for example the
repository's `celeryconfig.py`, copied and edited) is applied on top. Every value is here for a
reason; see the comments.
"""

from __future__ import annotations

from kombu import Exchange, Queue  # type: ignore[attr-defined]

from agent_jobs.config import settings as _settings
from agent_jobs.core.names import control_queue as _control_queue
from agent_jobs.core.names import submit_queue as _submit_queue
from agent_jobs.orchestrator.sweepers import periods as _sweep_periods

_s = _settings()

broker_url = _s.broker_url
broker_connection_retry_on_startup = True

broker_transport_options: dict[str, object] = {
    # One priority step: kombu's Redis transport otherwise BRPOPs four keys per queue.
    "priority_steps": [0],
    # Longer than any step; a step's own recovery is the lease, not redelivery.
    "visibility_timeout": 600,
    # The in-process broker polls; its 1 s default would make the embedded demo crawl.
    "polling_interval": 0.005 if _s.embedded else 1.0,
}

# A step is acknowledged after it ran; a worker lost mid-step gets its message redelivered.
task_acks_late = True
task_reject_on_worker_lost = True
# Prefetch one message per process so tenants are served in turn, not in batches.
worker_prefetch_multiplier = 1
# Steps return nothing: results live in Postgres, not in a result backend.
task_ignore_result = True
task_store_errors_even_if_ignored = False
task_serializer = "json"
accept_content = ["json"]
timezone = "UTC"
enable_utc = True

# Broadcasts (add_consumer to a new tenant's queue) and events are namespaced by the queue
# prefix: two deployments sharing one Redis must not steer each other's workers.
control_exchange = _s.queue_prefix
event_exchange = f"{_s.queue_prefix}.events"

# Tenant queues are created on first publish and consumed dynamically (see queue/consumers.py).
task_create_missing_queues = True
task_default_queue = _control_queue(_s.queue_prefix)
# Each static queue gets its own direct exchange: without one, Celery binds every queue to the
# default exchange with the default routing key, and sweeps would land in the submit queue too.
task_queues = [
    Queue(name, Exchange(name, type="direct"), routing_key=name)
    for name in (_control_queue(_s.queue_prefix), _submit_queue(_s.queue_prefix))
]
task_routes = {
    "agent_jobs.sweep.*": {"queue": _control_queue(_s.queue_prefix)},
    "agent_jobs.submit": {"queue": _submit_queue(_s.queue_prefix)},
}

# Task events cost three extra broker publishes per step. Queue lengths in Flower do not need
# them; Flower's task pages do: AGENT_JOBS_TASK_EVENTS=1 (or `celery -A agent_jobs control
# enable_events` at run time).
worker_send_task_events = _s.task_events
task_send_sent_event = False

# Every sweeper kind (listed once, in orchestrator/sweepers.py) at the sweep interval, except
# those that prune old rows, which can wait minutes.
_sweep_every = _sweep_periods(_s.sweep_interval_s)

beat_schedule = {
    f"sweep-{kind}": {
        "task": f"agent_jobs.sweep.{kind}",
        "schedule": every,
        # A sweep that waited longer than an interval is superseded by the next one.
        "options": {"expires": max(1.0, every)},
    }
    for kind, every in _sweep_every.items()
}
