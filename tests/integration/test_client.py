"""`AgentJobsClient` against a live API (uvicorn) and a real worker (in a thread) on Postgres and
Redis: typed results, typed errors, `wait`, and one task however often `create` retries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter

from agent_jobs.client import (
    AgentJobsClient,
    Conflict,
    Forbidden,
    IdempotencyConflict,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    WaitTimeout,
)
from tests.integration.api_env import api_settings, harness_api, live_runtime, serve, token

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

BIG = {"account": "acc_7", "amount_minor": 150_000}


@pytest.fixture
def live(
    pg_database: str, pg_store: Any, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Any]]:
    from agent_jobs.api.app import create_app
    from agent_jobs.queue.embedded import EmbeddedWorker

    monkeypatch.setenv("AGENT_JOBS_EXAMPLE_BACKEND", str(tmp_path / "ledger.db"))
    with (
        live_runtime(pg_database) as runtime,
        EmbeddedWorker(concurrency=2, beat_enabled=False),
        serve(create_app(runtime)) as base,
    ):
        yield base, runtime


def no_sleep(_: float) -> None:
    pass


def test_create_wait_get_events(live: tuple[str, Any], tenant: str) -> None:
    base, runtime = live
    client = AgentJobsClient(base, token(runtime.settings, tenant, "svc"))
    created = client.create("noop@1", {"steps": 3})
    assert created.status.value == "RECEIVED" and len(created.trace_id) == 32
    task = client.wait(created.task_id, timeout=60)
    assert task.status.value == "COMPLETED" and task.outcome == {"steps": 3}
    assert client.get(created.task_id) == task
    events = client.events(created.task_id)
    assert events[0].type == "created" and events[-1].to_status is not None
    assert events[-1].to_status.value == "COMPLETED"
    assert client.events(created.task_id, after_seq=events[-1].seq) == []


class LoseFirstResponse(HTTPAdapter):
    """Forwards the first POST, then drops its answer on the floor (a connection reset)."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().send(request, *args, **kwargs)
        if request.method == "POST":
            self.keys.append(request.headers["Idempotency-Key"])
            if len(self.keys) == 1:
                raise requests.ConnectionError("connection reset by peer")
        return response


class FailFirst(HTTPAdapter):
    """Answers the first `fail` requests with 503 without sending them."""

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail
        self.seen = 0

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self.seen += 1
        if self.seen <= self.fail:
            response = requests.Response()
            response.status_code = 503
            response._content = b'{"error": {"code": "unavailable", "message": "db down"}}'
            response.request = request
            return response
        return super().send(request, *args, **kwargs)


def _session(adapter: HTTPAdapter) -> requests.Session:
    session = requests.Session()
    session.mount("http://", adapter)
    return session


def test_create_reuses_its_key_when_the_response_is_lost(
    live: tuple[str, Any], tenant: str
) -> None:
    base, runtime = live
    adapter = LoseFirstResponse()
    client = AgentJobsClient(
        base, token(runtime.settings, tenant), session=_session(adapter), sleep=no_sleep
    )
    created = client.create("noop@1", {"steps": 1})
    assert len(adapter.keys) == 2 and adapter.keys[0] == adapter.keys[1]  # same key, twice
    tasks = runtime.store.list_tasks(tenant)
    assert [t.id for t in tasks] == [created.task_id]  # one task, not two
    assert tasks[0].idempotency_key == adapter.keys[0]


def test_create_retries_5xx_and_gives_up_typed(live: tuple[str, Any], tenant: str) -> None:
    base, runtime = live
    tok = token(runtime.settings, tenant)
    client = AgentJobsClient(base, tok, session=_session(FailFirst(2)), sleep=no_sleep)
    created = client.create("noop@1", idempotency_key="mine-1")
    assert runtime.store.get(created.task_id).idempotency_key == "mine-1"
    always = AgentJobsClient(base, tok, session=_session(FailFirst(99)), retries=2, sleep=no_sleep)
    with pytest.raises(ServerError) as info:
        always.create("noop@1")
    assert info.value.status == 503 and info.value.code == "unavailable"


def test_errors_are_typed(live: tuple[str, Any], tenant: str) -> None:
    base, runtime = live
    client = AgentJobsClient(base, token(runtime.settings, tenant), sleep=no_sleep)
    other = AgentJobsClient(base, token(runtime.settings, "someone-else"), sleep=no_sleep)
    created = client.create("noop@1", {"steps": 1}, idempotency_key="k1")
    with pytest.raises(NotFound):
        other.get(created.task_id)
    with pytest.raises(IdempotencyConflict):
        client.create("noop@1", {"steps": 2}, idempotency_key="k1")
    with pytest.raises(Forbidden):
        client.approvals()
    with pytest.raises(Unauthorized):
        AgentJobsClient(base, "forged", sleep=no_sleep).get(created.task_id)
    client.wait(created.task_id, timeout=60)
    with pytest.raises(Conflict) as info:
        client.cancel(created.task_id)
    assert info.value.code == "task_finished"


def test_approval_flow_and_wait_timeout(live: tuple[str, Any], tenant: str) -> None:
    base, runtime = live
    svc = AgentJobsClient(base, token(runtime.settings, tenant, "svc"))
    alice = AgentJobsClient(base, token(runtime.settings, tenant, "alice", roles=("approver",)))
    created = svc.create("example@1", BIG)
    parked = svc.wait(created.task_id, timeout=60, until={"awaiting_approval"})
    assert parked.display_status == "awaiting_approval" and parked.approval_id
    with pytest.raises(WaitTimeout) as info:
        svc.wait(created.task_id, timeout=0.2)
    assert info.value.task.display_status == "awaiting_approval"
    [approval] = alice.approvals(task_id=created.task_id)
    assert approval.args["amount_minor"] == 150_000
    granted = alice.grant(approval.approval_id, note="ok")
    assert granted.status == "granted" and granted.approver == "alice"
    assert svc.wait(created.task_id, timeout=60).status.value == "COMPLETED"
    with pytest.raises(Conflict):
        alice.deny(approval.approval_id)


def test_rate_limited_is_typed_with_retry_after(pg_store: Any, tmp_path: Path) -> None:
    cfg = api_settings(rate_per_s=0.01, rate_burst=1)
    api = harness_api(pg_store, tmp_path / "ledger.db", cfg)
    with serve(api.app) as base:
        client = AgentJobsClient(base, token(cfg, "acme"), sleep=no_sleep)
        client.create("noop@1")
        with pytest.raises(RateLimited) as info:
            client.create("noop@1")
    assert info.value.retry_after_s >= 1
    assert len(pg_store.list_tasks("acme")) == 1


def test_get_by_key_finds_the_callers_task_and_no_other_tenants(
    pg_store: Any, tmp_path: Path
) -> None:
    api = harness_api(pg_store, tmp_path / "ledger.db")
    key = "req-8472/a?b#c%d&e=f+g"  # printable ASCII: every character a URL treats specially
    with serve(api.app) as base:
        acme = AgentJobsClient(base, token(api.cfg, "acme", "svc"), sleep=no_sleep)
        created = acme.create("noop@1", {"steps": 1}, idempotency_key=key)
        found = acme.get_by_key(key)
        assert (found.task_id, found.tenant_id) == (created.task_id, "acme")
        beta = AgentJobsClient(base, token(api.cfg, "beta", "svc"), sleep=no_sleep)
        with pytest.raises(NotFound):
            beta.get_by_key(key)  # another tenant's key: 404, as if it did not exist
        with pytest.raises(NotFound):
            acme.get_by_key("never-used")
