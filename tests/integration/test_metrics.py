"""Prometheus metrics: what the API exposes (its own counters, the in-thread worker's, and the
per-tenant queue gauges read from Redis at scrape time), what a prefork worker's exporter sums
over its processes, that the exposition passes the format check, and that no task id is a label."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.names import ENQUEUED_AT_HEADER, tenant_queue
from agent_jobs.obs.queues import oldest_enqueued_at
from agent_jobs.store import Dispatch
from tests.integration.api_env import auth, free_port, live_runtime, token, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
REPO = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition (this is also the standard parser's format check)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def promtool_check(text: str) -> None:
    if shutil.which("promtool") is None:
        return  # the parser above is the check; promtool adds its lint where installed
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


class Scraper:
    """The API's metrics, read from its metrics port as Prometheus would."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def get(self, path: str = "/metrics", **kw: Any) -> requests.Response:
        return requests.get(self.url, timeout=5, **kw)


@pytest.fixture
def api(pg_database: str, pg_store: Any, redis_url: str) -> Iterator[tuple[Any, Any, Scraper]]:
    from fastapi.testclient import TestClient

    from agent_jobs.api.app import create_app

    port = free_port()
    with live_runtime(pg_database) as runtime:
        cfg = runtime.settings.with_overrides(api_metrics_port=port)
        with TestClient(create_app(runtime, cfg)) as client:  # runs the lifespan: the exporter
            yield runtime, client, Scraper(port)


def test_metrics_are_on_their_own_port_only(api: tuple[Any, Any, Scraper]) -> None:
    _runtime, client, scraper = api
    assert client.get("/metrics").status_code == 404  # the public port names no tenant
    assert "/metrics" not in client.get("/openapi.json").json()["paths"]
    response = scraper.get()
    assert response.status_code == 200 and "agent_jobs_http_requests_total" in response.text
    openmetrics = scraper.get(headers={"Accept": "application/openmetrics-text"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")


def test_no_metrics_port_by_default_and_the_exporter_stops_with_the_app(
    pg_database: str, pg_store: Any
) -> None:
    from fastapi.testclient import TestClient

    from agent_jobs.api.app import create_app

    port = free_port()
    with live_runtime(pg_database) as runtime:
        assert runtime.settings.api_metrics_port is None
        with TestClient(create_app(runtime)) as client:
            assert client.get("/metrics").status_code == 404
        with TestClient(
            create_app(runtime, runtime.settings.with_overrides(api_metrics_port=port))
        ):
            assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).ok
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)


@pytest.mark.slow
def test_api_and_in_thread_worker_metrics(api: tuple[Any, Any, Scraper], tenant: str) -> None:
    from agent_jobs.queue.embedded import EmbeddedWorker

    runtime, client, scraper = api
    before = parse(scraper.get().text)
    tok = token(runtime.settings, tenant)
    with EmbeddedWorker(concurrency=2, beat_enabled=False):
        r = client.post(
            "/v1/tasks",
            json={"workflow": "noop@1", "input": {"steps": 2}},
            headers=auth(tok, **{"Idempotency-Key": "m1"}),
        )
        task_id = r.json()["task_id"]
        wait_until("completion", lambda: runtime.store.get(task_id).status.value == "COMPLETED")
        client.get(f"/v1/tasks/{task_id}", headers=auth(tok))
        client.get("/v1/tasks/tsk_missing", headers=auth("forged"))
    response = scraper.get()
    assert response.headers["content-type"].startswith("text/plain; version=")
    text = response.text
    after = parse(text)
    promtool_check(text)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert delta("agent_jobs_tasks_created_total", workflow="noop@1", via="http") == 1
    assert delta("agent_jobs_task_transitions_total", workflow="noop@1", to_status="COMPLETED") >= 1
    assert delta("agent_jobs_step_duration_seconds_count") >= 1
    assert delta("agent_jobs_auth_failures_total", reason="invalid_token") == 1
    assert delta("agent_jobs_http_requests_total", route="/v1/tasks/{task_id}", status="200") == 1
    assert ("agent_jobs_unauthorised_actions_executed_total", ()) in after
    assert value(after, "agent_jobs_unauthorised_actions_executed_total") == 0
    # No task id (or trace id) is ever a label value: one series per task would be unbounded.
    for (_, labels), _v in after.items():
        for _k, label in labels:
            assert not label.startswith(("tsk_", "apr_")) and task_id not in label


def test_queue_depth_and_oldest_age_per_tenant(api: tuple[Any, Any, Scraper], tenant: str) -> None:
    runtime, _client, client = api
    queue = tenant_queue(runtime.settings.queue_prefix, tenant)
    broker = redis.Redis.from_url(runtime.settings.broker_url)
    try:
        for _ in range(3):  # no worker runs: the messages wait
            runtime.publisher.publish(Dispatch(f"tsk_{uuid.uuid4().hex}", tenant))
        oldest = broker.lindex(queue, -1)
        assert oldest_enqueued_at(oldest) is not None  # every publish is stamped
        samples = parse(client.get("/metrics").text)
        assert value(samples, "agent_jobs_queue_depth", queue=queue, tenant=tenant) == 3
        age = value(samples, "agent_jobs_queue_oldest_age_seconds", queue=queue, tenant=tenant)
        assert 0 <= age < 3600
        # Rewrite the oldest message's stamp an hour back: the age follows the stamp.
        import json

        message = json.loads(oldest)
        message["headers"][ENQUEUED_AT_HEADER] -= 3600
        broker.lset(queue, -1, json.dumps(message))
        samples = parse(client.get("/metrics").text)
        age = value(samples, "agent_jobs_queue_oldest_age_seconds", queue=queue, tenant=tenant)
        assert age >= 3600
        # A message without the stamp (a foreign sender) counts in the depth; no age is guessed.
        broker.delete(queue)
        broker.lpush(queue, json.dumps({"headers": {}, "body": ""}))
        samples = parse(client.get("/metrics").text)
        assert value(samples, "agent_jobs_queue_depth", queue=queue, tenant=tenant) == 1
        key = ("agent_jobs_queue_oldest_age_seconds", (("queue", queue), ("tenant", tenant)))
        assert key not in samples
    finally:
        broker.delete(queue)


def test_oldest_stamp_parsing() -> None:
    assert oldest_enqueued_at(b'{"headers": {"aj-enqueued-at": 12.5}}') == 12.5
    assert oldest_enqueued_at(b'{"headers": {"aj-enqueued-at": true}}') is None
    assert oldest_enqueued_at(b'{"headers": {}}') is None
    assert oldest_enqueued_at(b"not json") is None
    assert oldest_enqueued_at(None) is None


@pytest.mark.slow
def test_prefork_worker_exporter_sums_its_processes(
    pg_database: str, pg_store: Any, redis_url: str, tenant: str, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "worker.log"
    env = {**os.environ, "AGENT_JOBS_DATABASE_URL": pg_database}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [
        sys.executable, "-m", "agent_jobs.cli", "worker",
        "--metrics-port", str(port), "--metrics-addr", "127.0.0.1",
        "--metrics-dir", str(tmp_path / "metrics"),
        "--", "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
        "--hostname", f"metrics-{uuid.uuid4().hex[:6]}@%h", "--without-mingle", "--without-gossip",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:

        def scrape() -> str | None:
            if proc.poll() is not None:
                raise AssertionError(f"the worker exited: {log.read_text()[-3000:]}")
            try:
                return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except requests.ConnectionError:
                return None

        wait_until("the exporter", scrape, timeout_s=60)
        with live_runtime(pg_database) as runtime:
            result = runtime.orchestrator.submit(
                tenant, "mp-1", TaskRequest(workflow="noop@1", input={"steps": 3}), requester="t"
            )
            task_id = result.task.id
            wait_until(
                "the worker to finish the task",
                lambda: runtime.store.get(task_id).status.value == "COMPLETED",
                timeout_s=90,
            )
        # The steps ran in the pool's child processes; the parent serves their sum.
        text = wait_until(
            "the children's samples",
            lambda: (
                (t := scrape())
                and total(parse(t), "agent_jobs_task_transitions_total", to_status="COMPLETED") >= 1
                and t
            ),
        )
        samples = parse(text)
        promtool_check(text)
        assert total(samples, "agent_jobs_task_transitions_total", workflow="noop@1") >= 4
        assert total(samples, "agent_jobs_step_duration_seconds_count") >= 4
        assert (tmp_path / "metrics").is_dir() and any((tmp_path / "metrics").glob("*.db"))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
