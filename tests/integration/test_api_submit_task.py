"""Celery-native intake: a service that speaks Celery sends `agent_jobs.submit` by name, without
importing agent_jobs, with its bearer token; the rules are the HTTP API's, and a message that
creates nothing is recorded with its reason. Runs a real worker (in a thread) on Redis and
Postgres, and a separate Celery app as the sender."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from celery import Celery

from agent_jobs.core.names import rejected_submission_id, submit_queue
from agent_jobs.store.migrate import downgrade, upgrade
from tests.integration.api_env import SECRET, live_runtime, token, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def worker(pg_database: str, pg_store: Any, redis_url: str) -> Iterator[Any]:
    from agent_jobs.queue.embedded import EmbeddedWorker

    with live_runtime(pg_database) as runtime, EmbeddedWorker(concurrency=2, beat_enabled=False):
        yield runtime


@pytest.fixture
def outcomes() -> Iterator[dict[str, Any]]:
    """message id -> what `agent_jobs.submit` returned for it (the worker runs in this process)."""
    from celery.signals import task_postrun

    seen: dict[str, Any] = {}

    def record(task_id: str | None = None, task: Any = None, retval: Any = None, **_: Any) -> None:
        if task is not None and task.name == "agent_jobs.submit" and task_id:
            seen[task_id] = retval

    task_postrun.connect(record, weak=False)
    yield seen
    task_postrun.disconnect(record)


@pytest.fixture
def sender(redis_url: str) -> Iterator[Celery]:
    """Another service's Celery app: it knows the broker and the task's name, nothing else."""
    app = Celery("orders-service", broker=redis_url)
    yield app
    app.close()


def send(
    sender: Celery, runtime: Any, *, headers: dict[str, str] | None = None, **kwargs: Any
) -> str:
    message_id = f"msg-{uuid.uuid4().hex}"
    sender.send_task(
        "agent_jobs.submit",
        kwargs=kwargs,
        headers=headers or {},
        queue=submit_queue(runtime.settings.queue_prefix),
        task_id=message_id,
    )
    return message_id


REQUEST = {"workflow": "noop@1", "input": {"steps": 1}}


def rejected(runtime: Any, message_id: str) -> Any:
    found = runtime.store.rejected_submissions(record_id=rejected_submission_id(message_id))
    return found[0] if found else None


def test_a_token_in_a_header_creates_the_task(
    worker: Any, sender: Celery, tenant: str, outcomes: dict[str, Any]
) -> None:
    tok = token(worker.settings, tenant, "svc-orders")
    first = send(
        sender,
        worker,
        headers={"authorization": f"Bearer {tok}"},
        idempotency_key="order-1",
        request=REQUEST,
    )
    result = wait_until("the submission", lambda: outcomes.get(first))
    assert result["created"] is True
    task = worker.store.get(result["task_id"])
    assert (task.tenant_id, task.idempotency_key, task.requester, task.workflow) == (
        tenant,
        "order-1",
        "svc-orders",
        "noop@1",
    )
    # The worker runs it too: the submission published its first step.
    wait_until("completion", lambda: worker.store.get(task.id).status.value == "COMPLETED")

    # The same key and payload again (a retried send), the token as an argument this time.
    again = send(sender, worker, token=tok, idempotency_key="order-1", request=REQUEST)
    replay = wait_until("the replay", lambda: outcomes.get(again))
    assert replay == {
        "task_id": task.id,
        "status": "COMPLETED",
        "trace_id": task.trace_id,
        "created": False,
    }
    assert len(worker.store.list_tasks(tenant)) == 1
    assert rejected(worker, again) is None


@pytest.mark.parametrize(
    ("make_token", "reason"),
    [
        (lambda cfg, t: None, "missing_token"),
        (lambda cfg, t: "not-a-jwt", "invalid_token"),
        (
            lambda cfg, t: jwt.encode(
                {"iss": "agent-jobs", "aud": "agent-jobs", "sub": "x", "tenant": t, "exp": 1},
                SECRET,
                algorithm="HS256",
            ),
            "token_expired",
        ),
        (
            lambda cfg, t: jwt.encode(
                {"iss": "agent-jobs", "aud": "agent-jobs", "sub": "x", "tenant": t, "exp": 2**33},
                "another-secret-0123456789-abcdefghijklm",
                algorithm="HS256",
            ),
            "bad_signature",
        ),
    ],
)
def test_missing_or_invalid_token_creates_nothing_and_is_recorded(
    worker: Any, sender: Celery, tenant: str, make_token: Any, reason: str
) -> None:
    tok = make_token(worker.settings, tenant)
    headers = {"authorization": f"Bearer {tok}"} if tok else None
    message_id = send(sender, worker, headers=headers, idempotency_key="k1", request=REQUEST)
    record = wait_until("the rejection record", lambda: rejected(worker, message_id))
    assert record.reason_code == reason
    assert record.via == "celery" and record.message_id == message_id
    assert record.tenant_id is None and record.subject is None  # nothing verified
    if reason in ("token_expired", "bad_signature"):
        assert record.claimed_tenant == tenant  # what the token claimed, kept apart
    assert worker.store.list_tasks(tenant) == []


def test_same_rules_as_the_http_api(worker: Any, sender: Celery, tenant: str) -> None:
    tok = token(worker.settings, tenant, "svc")
    hdr = {"authorization": f"Bearer {tok}"}
    send(sender, worker, headers=hdr, idempotency_key="k1", request=REQUEST)
    wait_until("the task", lambda: worker.store.list_tasks(tenant))
    cases = {
        "idempotency_key_reused": {
            "idempotency_key": "k1",
            "request": {"workflow": "noop@1", "input": {"steps": 9}},
        },
        "invalid_idempotency_key": {"idempotency_key": "has space", "request": REQUEST},
        "unknown_workflow": {"idempotency_key": "k2", "request": {"workflow": "nope@1"}},
        "invalid_input": {"idempotency_key": "k3", "request": "not an object"},
    }
    ids = {code: send(sender, worker, headers=hdr, **kw) for code, kw in cases.items()}
    for code, message_id in ids.items():
        record = wait_until(code, lambda m=message_id: rejected(worker, m))
        assert record.reason_code == code
        assert (record.tenant_id, record.subject) == (tenant, "svc")
    assert [t.idempotency_key for t in worker.store.list_tasks(tenant)] == ["k1"]


def test_an_empty_bucket_retries_then_is_recorded(
    pg_database: str, pg_store: Any, redis_url: str, sender: Celery, tenant: str
) -> None:
    from agent_jobs.queue.embedded import EmbeddedWorker

    # A bucket that never holds a token for this tenant: each try waits ~1 s, then gives up.
    limits = ((tenant, 100.0, 0),)
    with (
        live_runtime(pg_database, rate_limits=limits, rate_per_s=100.0, submit_max_retries=1) as rt,
        EmbeddedWorker(concurrency=2, beat_enabled=False),
    ):
        tok = token(rt.settings, tenant)
        message_id = send(
            sender,
            rt,
            headers={"authorization": f"Bearer {tok}"},
            idempotency_key="k",
            request=REQUEST,
        )
        record = wait_until("the rejection", lambda: rejected(rt, message_id), timeout_s=60)
        assert record.reason_code == "rate_limited" and record.tenant_id == tenant
        assert rt.store.list_tasks(tenant) == []


def test_a_redelivered_rejection_is_recorded_once(worker: Any) -> None:
    from agent_jobs.api.submit_task import submit

    for _ in range(2):  # the same message id twice, as a broker redelivery would
        result = submit.apply(
            kwargs={"idempotency_key": "k", "request": REQUEST}, task_id="dup-msg"
        ).result
        assert result == {"rejected": "missing_token", "message": "a bearer token is required"}
    assert len(worker.store.rejected_submissions(record_id=rejected_submission_id("dup-msg"))) == 1


def test_migration_0002_goes_up_and_down_on_sqlite(tmp_path: Path) -> None:
    from sqlalchemy import inspect

    from agent_jobs.store.engine import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    upgrade(engine)
    assert "rejected_submissions" in inspect(engine).get_table_names()
    downgrade(engine, "0001")
    assert "rejected_submissions" not in inspect(engine).get_table_names()
    upgrade(engine)
    assert "rejected_submissions" in inspect(engine).get_table_names()
    engine.dispose()
