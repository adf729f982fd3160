"""`agent-jobs release eval` beside a production worker: the eval's tasks never reach the
production database or the queues production workers consume.

A real Celery worker process runs on a Postgres database of this test's own and the test Redis
(a queue prefix of its own); `release eval ID --runs 1 --limit 1` runs as the operator runs it,
in a process with the production variables. Before the gate ran in a process of its own, the
eval reused the command's runtime: its tasks were written to the production database and
published to the production queues, and the production worker ran their steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agent_jobs.bench.procs import WorkerProcess
from agent_jobs.evals.runner import release_manifest
from agent_jobs.releases import Manifest
from agent_jobs.workflows.refund.wiring import ROUTE_KEY
from tests.conftest import new_database
from tests.support.live import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

RID = "rel-isolation"
# Written by the eval's record (and nothing else): the release row, its history.
RECORD_TABLES = {"releases", "release_history"}


@pytest.fixture
def production(redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A production environment of this test's own: its database, Redis, queue prefix."""
    from agent_jobs.store.engine import make_engine
    from agent_jobs.store.migrate import upgrade

    with new_database() as url:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield {
            "AGENT_JOBS_DATABASE_URL": url,
            "AGENT_JOBS_BROKER_URL": redis_url,
            "AGENT_JOBS_QUEUE_PREFIX": f"ajiso{uuid.uuid4().hex[:8]}",
            "AGENT_JOBS_EXAMPLE_BACKEND": str(tmp_path / "ledger.db"),
            "AGENT_JOBS_TOOL_SECRET": os.environ["AGENT_JOBS_TOOL_SECRET"],
        }


def snapshot(store: Any) -> dict[str, list[str]]:
    """Every row of every table (but the eval's record), as text, in a stable order."""
    from agent_jobs.store.schema import metadata

    out = {}
    with store.engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name not in RECORD_TABLES:
                out[table.name] = sorted(repr(tuple(r)) for r in conn.execute(select(table)))
    return out


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_release_eval_beside_a_production_worker_leaves_production_alone(
    production: dict[str, str], tmp_path: Path
) -> None:
    from agent_jobs.store import Store

    # Everything production does goes through its own processes (the CLI, the worker): this
    # process's Celery app may be bound to another broker by an earlier in-process eval.
    manifest = {**release_manifest("honest"), "release_id": RID, "model_route": ROUTE_KEY}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    store = Store.from_url(production["AGENT_JOBS_DATABASE_URL"])
    # DEBUG: the worker logs each message it receives (a step of any task).
    worker = WorkerProcess(production, name="prod", log=tmp_path / "prod.log", loglevel="DEBUG")
    try:
        wait_until("the worker ready", lambda: " ready." in worker.log.read_text(), 120, 0.2)
        created = cli(production, "release", "create", str(tmp_path / "manifest.json"))
        assert created.returncode == 0, created.stderr
        # Production traffic first, so the worker is shown to run what it is sent.
        live = cli(
            production, "submit", "--tenant", "acme", "--key", "k-live", "--workflow",
            "example@1", "--input", json.dumps({"account": "acc_1", "amount_minor": 900}),
            "--json",
        )  # fmt: skip
        assert live.returncode == 0, live.stderr
        live_id = json.loads(live.stdout)["task_id"]
        wait_until(
            "the live task done",
            lambda: store.get(live_id).status.value == "COMPLETED",
            120,
            every_s=0.2,
        )
        received = worker.log.read_text().count(" received")
        assert received >= 1
        before = snapshot(store)

        done = cli(production, "release", "eval", RID, "--runs", "1", "--limit", "1", "--quiet")
        refused = cli(production, "release", "promote", RID, "--reason", "subset passed")

        assert done.returncode == 0, done.stderr + done.stdout
        assert "partial eval" in done.stdout
        assert refused.returncode == 2 and "no passing eval" in refused.stderr
        # Nothing but the eval's record changed in production; the worker ran nothing more.
        assert snapshot(store) == before
        log = worker.log.read_text()
        assert log.count(" received") == received, log[-3000:]
        assert "eval-" not in log
        assert store.get_release(RID).eval_status is None  # a subset is history only
        [record] = [h for h in store.release_history() if h.action == "eval"]
        assert record.reason == "partial (passed)" and record.data is not None
        assert record.data["manifest_hash"] == Manifest.parse(manifest).content_hash()
        assert set(record.data["suites"]) == {"golden-refund@2", "safety@1"}
    finally:
        worker.stop()
        store.dispose()
