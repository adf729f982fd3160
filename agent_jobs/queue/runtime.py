"""Wiring: one `Runtime` per process (store, workflows, publisher, orchestrator, sweepers).

Built lazily on first use, and again after a fork: a prefork child must not share its parent's
database connections.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from celery.signals import beat_init, worker_init

from agent_jobs.config import Settings, settings
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.names import ENQUEUED_AT_RECEIVER
from agent_jobs.gateway.slots import ModelSlots, model_slots_for
from agent_jobs.ops.live import start_process_switches
from agent_jobs.orchestrator.ports import BrokerProbe, FreshInProcessBroker, NeverLost, Observer
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.runner import Orchestrator
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.queue.broker_redis import is_sentinel
from agent_jobs.queue.carried_rows import CarriedRows
from agent_jobs.queue.directory import (
    InMemoryTenantDirectory,
    RedisTenantDirectory,
    TenantDirectory,
)
from agent_jobs.queue.gate import GatedDispatcher, GatePolicy, RedisGate
from agent_jobs.queue.publisher import CeleryPublisher, RedisBrokerProbe
from agent_jobs.queue.ready_ring import ring_for
from agent_jobs.store import Store
from agent_jobs.tools.credentials import tool_secret
from agent_jobs.workflows import default_registry, exit_unless_loaded


@dataclass
class Runtime:
    settings: Settings
    store: Store
    workflows: WorkflowRegistry
    directory: TenantDirectory
    publisher: CeleryPublisher
    orchestrator: Orchestrator
    sweepers: Sweepers
    pid: int
    gated: GatedDispatcher | None = None
    model_slots: ModelSlots | None = None


_lock = threading.Lock()
_runtime: Runtime | None = None
_embedded_directory = InMemoryTenantDirectory()


_app: Any = None


def bind_app(app: Any) -> None:
    """Called by the composition root (`queue/app.py`) once it has built the Celery app: the app
    that `get_runtime()` builds this process's runtime with."""
    global _app
    _app = app


def bound_app() -> Any:
    """The Celery app bound by `queue/app.py`. A process that has not loaded it yet (a CLI
    command, the API) loads it here: `queue/app.py` is the composition root, and binds itself."""
    if _app is None:
        import agent_jobs.queue.app  # noqa: F401, PLC0415 - binds the app as it loads
    if _app is None:
        raise ConfigError("the Celery app is not bound (agent_jobs.queue.app did not load)")
    return _app


def build_runtime(
    cfg: Settings,
    *,
    app: Any = None,
    workflows: WorkflowRegistry | None = None,
    observer: Observer | None = None,
) -> Runtime:
    """Wire one runtime: store, workflows, directory, publisher (over `app`, the Celery app;
    default: the one `queue/app.py` bound), gate, orchestrator and sweepers."""
    # Imported here: app.py installs the consumer bootstep, which needs this module; the
    # metrics module imports prometheus_client, which a worker must import only after it chose
    # multiprocess mode.
    from celery.signals import before_task_publish  # noqa: PLC0415

    from agent_jobs.obs.metrics import PrometheusObserver, stamp_enqueued_at  # noqa: PLC0415
    from agent_jobs.obs.otel import traced  # noqa: PLC0415

    app = app if app is not None else bound_app()

    # Metrics: the Prometheus observer unless the caller brings one, and an enqueue-time stamp
    # on every message this process publishes (queue age at scrape time; see obs/queues.py).
    before_task_publish.connect(stamp_enqueued_at, weak=False, dispatch_uid=ENQUEUED_AT_RECEIVER)
    store = Store.from_url(cfg.database_url)
    # Exports each ended task's trace when the OTEL_* variables ask for it.
    observer = traced(observer or PrometheusObserver(), store)
    registry = workflows or default_registry()
    redis_url = cfg.directory_redis_url
    directory: TenantDirectory
    probe: BrokerProbe
    if redis_url:
        directory = RedisTenantDirectory(
            redis_url, cfg.queue_prefix, sentinel_master=cfg.sentinel_master
        )
    else:
        directory = _embedded_directory
    if cfg.broker_url.startswith(("redis://", "rediss://")) or is_sentinel(cfg.broker_url):
        probe = RedisBrokerProbe(cfg.broker_url, cfg.queue_prefix, cfg.sentinel_master)
    elif cfg.embedded:
        probe = FreshInProcessBroker()
    else:
        probe = NeverLost()
    rows = CarriedRows(store, cfg.step_row_max_bytes)
    publisher = CeleryPublisher(
        app,
        directory,
        cfg.queue_prefix,
        shared=cfg.routing == "shared",
        rows=rows,
        ring=ring_for(cfg) is not None,
    )
    gate, slots = gate_and_slots(cfg)
    # Operator switches (ops/): every process obeys them; the gate holds what a pause stops.
    switches = start_process_switches(
        store, cfg.directory_redis_url, cfg.queue_prefix, cfg.sentinel_master
    )
    gated = GatedDispatcher(publisher.send, store, gate, slots, observer, switches=switches)
    publisher.gated = gated
    orchestrator = Orchestrator(store, registry, publisher, cfg, observer=observer)
    sweepers = Sweepers(store, publisher, cfg, probe, observer=observer, gated=gated)
    return Runtime(
        cfg,
        store,
        registry,
        directory,
        publisher,
        orchestrator,
        sweepers,
        os.getpid(),
        gated,
        slots,
    )


def gate_and_slots(cfg: Settings) -> tuple[RedisGate | None, ModelSlots | None]:
    """The dispatch gate and the model-call slots this configuration asks for (both in Redis,
    shared by every worker; the model slots fall back to this process in the embedded mode)."""
    policy = GatePolicy(
        default_cap=cfg.tenant_cap,
        caps=dict(cfg.tenant_caps),
        fair_share=cfg.fair_share,
        weights=dict(cfg.tenant_weights),
        quantum_s=cfg.fair_quantum_s,
        slot_ttl_s=cfg.slot_ttl_s,
    )
    url = cfg.directory_redis_url
    gate = None
    if policy.enabled:
        if url is None:
            raise ConfigError("tenant caps and fair share need Redis (AGENT_JOBS_REDIS_URL)")
        gate = RedisGate(url, cfg.queue_prefix, policy, sentinel_master=cfg.sentinel_master)
    return gate, model_slots_for(cfg)


def get_runtime() -> Runtime:
    """This process's runtime, built from the environment on first use."""
    global _runtime
    current = _runtime
    if current is not None and current.pid == os.getpid():
        return current
    with _lock:
        if _runtime is not None and _runtime.pid != os.getpid():
            # Inherited across fork: drop the parent's pooled connections without closing them
            # (closing would send a terminate on sockets the parent still uses).
            _runtime.store.engine.dispose(close=False)
            _runtime = None
        if _runtime is None:
            _runtime = build_runtime(settings())
        return _runtime


def set_runtime(runtime: Runtime | None) -> None:
    """Install a runtime (tests, the embedded runner); None resets to lazy construction."""
    global _runtime
    with _lock:
        _runtime = runtime


EXIT_NOT_MIGRATED = 3
EXIT_CONFIG = 2


def exit_without_tool_secret(**_: Any) -> None:
    """At worker start: one line naming `AGENT_JOBS_TOOL_SECRET` and exit status 2 when it is
    missing outside the embedded mode, instead of a worker that fails the first tool call (or,
    as it once did, signs credentials with a public development value)."""
    try:
        tool_secret(settings())
    except ConfigError as exc:
        print(f"agent-jobs: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CONFIG) from None


def exit_unless_migrated(sender: Any = None, **_: Any) -> None:
    """At worker and beat start (Celery's `worker_init` / `beat_init`): one line and exit status
    3 if the database or the broker does not answer, or the schema is not there, instead of a
    traceback for every step and every sweep. Exiting, not waiting: a supervisor (compose's
    restart policy, systemd) retries, and a person at a terminal sees what to fix. Checked
    before the runtime is built: building it reads the database (the operator switches)."""
    from agent_jobs.queue.reach import exit_if_unreachable  # noqa: PLC0415

    role = "beat" if type(sender).__module__.startswith("celery.beat") else "worker"
    exit_if_unreachable(f"agent-jobs {role}", settings())
    from agent_jobs.store.migrate import schema_problem  # noqa: PLC0415

    problem = schema_problem(get_runtime().store.engine)
    if problem is not None:
        # The real stderr: beat has redirected sys.stderr into its logger by now.
        print(f"agent-jobs: {problem}", file=sys.__stderr__ or sys.stderr, flush=True)
        raise SystemExit(EXIT_NOT_MIGRATED)


# Celery logs two INFO lines for every message ("Task ... received", "Task ... succeeded in"):
# with one message per step and seven sweepers on a short interval, a worker at INFO would
# write thousands of lines a minute that say nothing the task's event log does not. Failures,
# retries and rejections are WARNING or ERROR and still show; `--loglevel DEBUG` shows it all.
PER_MESSAGE_LOGGERS = ("celery.app.trace", "celery.worker.strategy")


def quiet_per_message_logs(sender: Any = None, **_: Any) -> None:
    """At worker start (before Celery builds its tracers, which read the level once): the
    per-message loggers at WARNING, unless the worker runs at DEBUG."""
    level = getattr(sender, "loglevel", logging.INFO)
    if not isinstance(level, int) or level > logging.DEBUG:
        for name in PER_MESSAGE_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def quiet_beat_schedule_logs(**_: Any) -> None:
    """Beat at INFO logs "Sending due task" for every sweeper every interval (seven lines every
    few seconds); what a sweep did is logged by the worker that ran it. Kept at DEBUG."""
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("celery.beat").setLevel(logging.WARNING)


worker_init.connect(exit_without_tool_secret, weak=False, dispatch_uid="agent_jobs.tool_secret")
# Workflows load before the schema check builds the runtime (a load error there is only logged).
worker_init.connect(exit_unless_loaded, weak=False, dispatch_uid="agent_jobs.workflows")
worker_init.connect(exit_unless_migrated, weak=False, dispatch_uid="agent_jobs.schema_check")
worker_init.connect(quiet_per_message_logs, weak=False, dispatch_uid="agent_jobs.quiet_logs")
beat_init.connect(exit_unless_loaded, weak=False, dispatch_uid="agent_jobs.workflows.beat")
beat_init.connect(exit_unless_migrated, weak=False, dispatch_uid="agent_jobs.schema_check.beat")
beat_init.connect(quiet_beat_schedule_logs, weak=False, dispatch_uid="agent_jobs.quiet_beat")
