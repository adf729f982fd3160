"""Celery settings for agent_jobs, derived from the settings schema (`agent_jobs.config.Settings`).

`celery_settings(cfg)` is a pure function of one `Settings`: nothing here is computed at import.
The app (`queue/app.py`) calls it, with the process's settings, when Celery first needs its
configuration; `override_settings` then applies the module named by AGENT_JOBS_CELERY_CONFIG, if
any (for example the repository's `celeryconfig.py`, copied and edited), on top. Every value is
here for a reason; see the comments.
"""

from __future__ import annotations

import importlib
from typing import Any

from kombu import Exchange, Queue  # type: ignore[attr-defined]

from agent_jobs.config import Settings
from agent_jobs.core.names import control_queue, submit_queue
from agent_jobs.orchestrator.sweep_kinds import periods as sweep_periods
from agent_jobs.queue.broker_redis import is_sentinel
from agent_jobs.queue.transport import transport_for
from agent_jobs.releases.schedule import beat_entries as release_beat_entries

# kombu's redelivery of an unacknowledged message (Redis transport): ten times the default
# dispatch grace, so the sweepers, not redelivery, recover a step whose worker died.
VISIBILITY_TIMEOUT_S = 600


def celery_settings(cfg: Settings) -> dict[str, Any]:
    """Every Celery setting agent_jobs sets, from `cfg` alone (a fresh dict on each call)."""
    prefix = cfg.queue_prefix
    control, submit = control_queue(prefix), submit_queue(prefix)
    return {
        "broker_url": cfg.broker_url,
        # agent_jobs' subclass of kombu's Redis transport for a `redis://` URL (step acks in
        # memory, one Redis client per channel: queue/transport.py); the wire format is kombu's.
        "broker_transport": transport_for(cfg.broker_url),
        # A worker never exits because the broker went away: it reconnects, at start and after
        # a loss, for as long as it takes (Celery's default gives up after 100 attempts), and a
        # channel error (Redis answering LOADING while it restarts) is treated the same way.
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        "broker_channel_error_retry": True,
        "broker_transport_options": {
            # One priority step: kombu's Redis transport otherwise BRPOPs four keys per queue.
            "priority_steps": [0],
            # Longer than any step; a step's own recovery is the lease, not redelivery.
            "visibility_timeout": VISIBILITY_TIMEOUT_S,
            # The in-process broker polls; its 1 s default would make the embedded demo crawl.
            "polling_interval": 0.005 if cfg.embedded else 1.0,
        }
        # Under Sentinel: the service whose primary the Sentinels are asked for.
        | ({"master_name": cfg.sentinel_master} if is_sentinel(cfg.broker_url) else {}),
        # A step is acknowledged after it ran; a worker lost mid-step gets its message
        # redelivered.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # Prefetch one message per process so tenants are served in turn, not in batches.
        "worker_prefetch_multiplier": 1,
        # Steps return nothing: results live in Postgres, not in a result backend.
        "task_ignore_result": True,
        "task_store_errors_even_if_ignored": False,
        "task_serializer": "json",
        "accept_content": ["json"],
        "timezone": "UTC",
        "enable_utc": True,
        # Broadcasts (add_consumer to a new tenant's queue) and events are namespaced by the
        # queue prefix: two deployments sharing one Redis must not steer each other's workers.
        "control_exchange": prefix,
        "event_exchange": f"{prefix}.events",
        # Tenant queues are created on first publish and consumed dynamically (see
        # queue/consumers.py).
        "task_create_missing_queues": True,
        "task_default_queue": control,
        # Each static queue gets its own direct exchange: without one, Celery binds every queue
        # to the default exchange with the default routing key, and sweeps would land in the
        # submit queue too.
        "task_queues": [
            Queue(name, Exchange(name, type="direct"), routing_key=name)
            for name in (control, submit)
        ],
        "task_routes": {
            "agent_jobs.sweep.*": {"queue": control},
            "agent_jobs.submit": {"queue": submit},
        },
        # Task events cost three extra broker publishes per step. Queue lengths in Flower do not
        # need them; Flower's task pages do: AGENT_JOBS_TASK_EVENTS=1 (or `celery -A agent_jobs
        # control enable_events` at run time).
        "worker_send_task_events": cfg.task_events,
        "task_send_sent_event": False,
        # Every sweeper kind (listed once, in orchestrator/sweepers.py) at the sweep interval,
        # except those that prune old rows, which can wait minutes.
        "beat_schedule": {
            f"sweep-{kind}": {
                "task": f"agent_jobs.sweep.{kind}",
                "schedule": every,
                # A sweep that waited longer than an interval is superseded by the next one.
                "options": {"expires": max(1.0, every)},
            }
            for kind, every in sweep_periods(cfg.sweep_interval_s).items()
        }
        | release_beat_entries(cfg),  # the release guardrails (AGENT_JOBS_GUARDRAILS_INTERVAL_S)
    }


def override_settings(module: str | None) -> dict[str, Any]:
    """The settings of the override module (AGENT_JOBS_CELERY_CONFIG): its lower-case attributes
    not starting with `_`; imported classes (`Queue`) and private helpers are skipped. A setting
    given there replaces agent_jobs' value whole (a dict is not merged)."""
    if not module:
        return {}
    found = vars(importlib.import_module(module))
    # Settings are the module's public names: not its private ones, nor what an import hook
    # adds (pytest's assertion rewriting leaves `@py_builtins` in a module it rewrote).
    return {
        k: v for k, v in found.items() if k.isidentifier() and k.islower() and not k.startswith("_")
    }


def app_settings(cfg: Settings) -> dict[str, Any]:
    """What the app is configured with: agent_jobs' settings, the override module's on top."""
    return {**celery_settings(cfg), **override_settings(cfg.celery_config)}
