"""Wiring: one `Runtime` per process (store, workflows, publisher, orchestrator, sweepers).

Built lazily on first use, and again after a fork: a prefork child must not share its parent's
database connections.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from agent_jobs.config import Settings, settings
from agent_jobs.core.errors import ConfigError
from agent_jobs.gateway.slots import ModelSlots, model_slots_for
from agent_jobs.orchestrator.ports import BrokerProbe, FreshInProcessBroker, NeverLost, Observer
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.runner import Orchestrator
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.queue.directory import (
    InMemoryTenantDirectory,
    RedisTenantDirectory,
    TenantDirectory,
)
from agent_jobs.queue.gate import GatedDispatcher, GatePolicy, RedisGate
from agent_jobs.queue.publisher import CeleryPublisher, RedisBrokerProbe
from agent_jobs.store import Store
from agent_jobs.workflows import default_registry


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


def build_runtime(
    cfg: Settings,
    *,
    workflows: WorkflowRegistry | None = None,
    observer: Observer | None = None,
) -> Runtime:
    # Imported here: app.py installs the consumer bootstep, which needs this module; the
    # metrics module imports prometheus_client, which a worker must import only after it chose
    # multiprocess mode.
    from celery.signals import before_task_publish  # noqa: PLC0415

    from agent_jobs.obs.metrics import PrometheusObserver, stamp_enqueued_at  # noqa: PLC0415
    from agent_jobs.queue.app import app  # noqa: PLC0415

    # Metrics: the Prometheus observer unless the caller brings one, and an enqueue-time stamp
    # on every message this process publishes (queue age at scrape time; see obs/queues.py).
    before_task_publish.connect(
        stamp_enqueued_at, weak=False, dispatch_uid="agent_jobs.enqueued_at"
    )
    observer = observer or PrometheusObserver()

    store = Store.from_url(cfg.database_url)
    registry = workflows or default_registry()
    redis_url = cfg.directory_redis_url
    directory: TenantDirectory
    probe: BrokerProbe
    if redis_url:
        directory = RedisTenantDirectory(redis_url, cfg.queue_prefix)
    else:
        directory = _embedded_directory
    if cfg.broker_url.startswith(("redis://", "rediss://")):
        probe = RedisBrokerProbe(cfg.broker_url, cfg.queue_prefix)
    elif cfg.embedded:
        probe = FreshInProcessBroker()
    else:
        probe = NeverLost()
    publisher = CeleryPublisher(app, directory, cfg.queue_prefix, shared=cfg.routing == "shared")
    gate, slots = gate_and_slots(cfg)
    gated = None
    if gate is not None or slots is not None:
        gated = GatedDispatcher(publisher.send, store, gate, slots, observer)
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
        gate = RedisGate(url, cfg.queue_prefix, policy)
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
