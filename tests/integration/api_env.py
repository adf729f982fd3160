"""Shared helpers for the API tests: settings with a test secret, tokens, an app over the inline
harness (deterministic steps), a live runtime for worker tests, and a uvicorn server in a thread."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_jobs.api.auth import mint_token
from agent_jobs.config import Settings, settings
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.testing import TEST_SETTINGS, Harness
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.example_backend import ExampleBackend
from agent_jobs.workflows.noop import NoopWorkflow
from tests.support import live

SECRET = "test-secret-0123456789-abcdefghijklmnop"


def api_settings(base: Settings | None = None, **overrides: Any) -> Settings:
    """Test settings: a known HS256 secret, admission off unless a test turns it on."""
    defaults: dict[str, Any] = {"jwt_secret": SECRET, "rate_per_s": 0.0}
    defaults.update(overrides)
    return (base or TEST_SETTINGS).with_overrides(**defaults)


def token(cfg: Settings, tenant: str, sub: str = "svc", roles: tuple[str, ...] = ()) -> str:
    return mint_token(cfg, tenant_id=tenant, subject=sub, roles=list(roles))


def auth(tok: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}", **extra}


def registry(ledger: Path, *extra: Any) -> tuple[WorkflowRegistry, ExampleBackend]:
    """The built-in workflows, with the example's ledger in a file of this test, plus `extra`."""
    backend = ExampleBackend(ledger)
    reg = WorkflowRegistry()
    reg.register(ExampleWorkflow(backend=backend))
    reg.register(NoopWorkflow())
    for workflow in extra:
        reg.register(workflow)
    return reg, backend


@dataclass
class ShimRuntime:
    """What `create_app` needs of a runtime, over the inline harness."""

    settings: Settings
    store: Any
    orchestrator: Any
    workflows: Any
    directory: Any = None


@dataclass
class HarnessApi:
    """The API over a real store with step messages run inline (`harness.run_until_idle()`)."""

    harness: Harness
    cfg: Settings
    client: Any
    backend: ExampleBackend
    app: Any = field(default=None)

    @property
    def store(self) -> Any:
        return self.harness.store


def harness_app(store: Any, reg: WorkflowRegistry, cfg: Settings) -> tuple[Harness, Any]:
    """The API app over the inline harness on `store`: step messages run when a test says."""
    from agent_jobs.api.app import create_app

    harness = Harness(store, reg, cfg)
    return harness, create_app(ShimRuntime(cfg, store, harness.orchestrator, reg), cfg)


def harness_api(
    store: Any, ledger: Path, cfg: Settings | None = None, workflows: tuple[Any, ...] = ()
) -> HarnessApi:
    from fastapi.testclient import TestClient

    cfg = cfg or api_settings()
    reg, backend = registry(ledger, *workflows)
    harness, app = harness_app(store, reg, cfg)
    return HarnessApi(harness, cfg, TestClient(app), backend, app)


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """Poll `check` until it returns something truthy (a bound on waiting, not an assertion on
    how long the work took)."""
    return live.wait_until(what, check, timeout_s, every_s=0.02)


@contextmanager
def live_runtime(database_url: str, **overrides: Any) -> Iterator[Any]:
    """This process's runtime on the test database and the test broker (the environment's)."""
    from agent_jobs.queue.runtime import build_runtime, set_runtime

    cfg = api_settings(settings(), database_url=database_url, **overrides)
    runtime = build_runtime(cfg)
    set_runtime(runtime)
    try:
        yield runtime
    finally:
        set_runtime(None)
        runtime.store.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """`app` under uvicorn on a free local port, in a thread; yields the base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="test-api", daemon=True)
    thread.start()
    try:
        wait_until("the API to start", lambda: server.started, timeout_s=20)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
