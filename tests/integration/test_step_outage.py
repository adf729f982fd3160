"""A step that cannot reach Postgres waits it out and moves as soon as the database answers
(issue 22, point 3), instead of raising out of the Celery task — which acked its message and left
the task to the dispatch sweeper's grace, 60 s by default.

The outage is real: the store reaches the test server through a proxy the test cuts
(`bench.proxy.CuttableProxy`: every connection reset, new ones refused) and restores from the
orchestrator's injected `sleep`, which also records every pause. So "within the bound" is read
from the pauses, never timed: each pause is at most `outage_retry_max_s`, and the step commits on
the first try after the database answers. A try is not a failed attempt of the task; an effect
whose outcome could not be recorded is reconciled by its key, never sent twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from agent_jobs.bench.proxy import CuttableProxy
from agent_jobs.core.contracts import Action, TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.runner import Orchestrator
from agent_jobs.store import Store
from agent_jobs.testing import TEST_SETTINGS, Harness, RecordingPublisher
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.example_backend import ExampleBackend
from agent_jobs.workflows.noop import NoopWorkflow

pytestmark = [pytest.mark.postgres]

SETTINGS = TEST_SETTINGS.with_overrides(outage_wait_s=60.0, outage_retry_max_s=2.0)
ANSWERS_AFTER = 4  # pauses before the test brings the database back


@pytest.fixture
def proxy(pg_store: Any) -> Iterator[CuttableProxy]:
    url = urlparse(pg_store.engine.url.render_as_string(hide_password=False))
    with CuttableProxy((url.hostname or "127.0.0.1", url.port or 5432)) as p:
        yield p


@pytest.fixture
def store(pg_store: Any, proxy: CuttableProxy) -> Iterator[Store]:
    """The test database, reached through the proxy."""
    url = pg_store.engine.url.set(host="127.0.0.1", port=proxy.port)
    s = Store.from_url(url.render_as_string(hide_password=False))
    yield s
    s.dispose()


class Pauses:
    """The orchestrator's `sleep`: records each pause and restores the proxy at the
    `ANSWERS_AFTER`th, as the database coming back while the step waits."""

    def __init__(self, proxy: CuttableProxy) -> None:
        self.proxy = proxy
        self.seconds: list[float] = []
        self.answered_at: int | None = None  # the pause during which the database came back

    def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        if len(self.seconds) == ANSWERS_AFTER and not self.proxy.up:
            self.proxy.restore()
            self.answered_at = len(self.seconds)


def _orchestrator(store: Store, registry: WorkflowRegistry, pauses: Pauses) -> Orchestrator:
    return Orchestrator(store, registry, RecordingPublisher(), SETTINGS, sleep=pauses)


def _noop_registry() -> WorkflowRegistry:
    registry = WorkflowRegistry()
    registry.register(NoopWorkflow())
    return registry


def _assert_moved_right_after_the_answer(pauses: Pauses) -> None:
    assert pauses.answered_at == ANSWERS_AFTER == len(pauses.seconds), pauses.seconds
    assert all(0 < p <= SETTINGS.outage_retry_max_s for p in pauses.seconds), pauses.seconds


def test_the_celery_step_waits_out_the_outage_instead_of_dropping_its_message(
    store: Store, proxy: CuttableProxy, tenant: str
) -> None:
    """Through the Celery task's body: before, it raised OperationalError (the message acked,
    the task left for the grace); now it returns once the step has committed."""
    from agent_jobs.queue import tasks as celery_tasks
    from agent_jobs.queue.runtime import Runtime, set_runtime

    pauses = Pauses(proxy)
    registry = _noop_registry()
    orch = _orchestrator(store, registry, pauses)
    task = orch.submit(
        tenant, "k1", TaskRequest(workflow="noop@1", input={"steps": 2}), requester="t"
    ).task
    runtime: Any = Runtime(SETTINGS, store, registry, None, orch.publisher, orch, None, os.getpid())  # type: ignore[arg-type]
    set_runtime(runtime)
    try:
        proxy.cut()
        celery_tasks.step.run(task.id)
    finally:
        set_runtime(None)
    _assert_moved_right_after_the_answer(pauses)
    after = store.get(task.id)
    assert after.status is Status.RUNNING and after.version > task.version
    assert after.attempts == 0 and after.last_error is None  # not a failed attempt
    assert orch.outage_retries == ANSWERS_AFTER


class CutAfterTransfer(ExampleWorkflow):
    """The example payout, with the database cut just after the ledger applied the transfer:
    the effect happened and its outcome cannot be recorded."""

    def __init__(self, backend: ExampleBackend, cut: Callable[[], None]) -> None:
        super().__init__(backend)
        self._cut: Callable[[], None] | None = cut

    def execute(self, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
        outcome = super().execute(inp, action)
        if self._cut is not None:
            self._cut, cut = None, self._cut
            cut()
        return outcome


def test_an_effect_whose_outcome_met_the_outage_is_reconciled_never_sent_again(
    store: Store, proxy: CuttableProxy, tenant: str, tmp_path: Path
) -> None:
    """The leased step holds its lease when the database goes: it cannot give it back, so the
    next try releases it first (fenced by epoch and owner) instead of waiting out the lease TTL;
    the new claim finds EXECUTING, reconciles by the idempotency key, finds the transfer."""
    ledger = ExampleBackend(tmp_path / "ledger.db")
    registry = WorkflowRegistry()
    registry.register(CutAfterTransfer(ledger, proxy.cut))
    pauses = Pauses(proxy)
    harness = Harness(store, registry, SETTINGS)
    harness.orchestrator = orch = _orchestrator(store, registry, pauses)
    orch.publisher = harness.publisher
    task = harness.submit(
        tenant,
        "pay-1",
        TaskRequest(workflow="example@1", input={"account": "a1", "amount_minor": 900}),
    )
    for _ in range(40):
        while harness.publisher.queue:
            d = harness.publisher.queue.popleft()
            orch.run_step_waiting(d.task_id, d.row, claim=d.claim)
        if store.get(task.id).status in TERMINAL:
            break
        harness.make_due(task.id)
        harness.sweepers.all()
    final = store.get(task.id)
    types = [e.type for e in store.events(task.id)]
    assert final.status is Status.COMPLETED, types
    _assert_moved_right_after_the_answer(pauses)
    assert len(ledger.transfers()) == 1  # the effect once
    assert [e.status for e in store.effects(task.id)] == ["committed"]
    assert "lease_lost_during_effect" in types and "reconciled_found" in types
    assert "lease_expired" not in types  # the stranded lease was given back, not waited out
    assert final.attempts == 0


def test_a_database_that_stays_away_is_waited_for_a_bounded_time(
    store: Store, proxy: CuttableProxy, tenant: str
) -> None:
    """Never a loop while the database stays down: the pauses add up to `outage_wait_s`, then
    an ordinary try raises as before (the message is acked; the sweepers take the task)."""
    registry = _noop_registry()
    seconds: list[float] = []
    settings = SETTINGS.with_overrides(outage_wait_s=5.0)
    orch = Orchestrator(store, registry, RecordingPublisher(), settings, sleep=seconds.append)
    task = orch.submit(
        tenant, "k2", TaskRequest(workflow="noop@1", input={"steps": 2}), requester="t"
    ).task
    proxy.cut()
    with pytest.raises(Exception) as raised:
        orch.run_step_waiting(task.id)
    assert "OperationalError" in type(raised.value).__name__
    assert sum(seconds) == pytest.approx(settings.outage_wait_s)
    assert all(p <= settings.outage_retry_max_s for p in seconds)
    assert orch.outage_retries == len(seconds)
    proxy.restore()
    assert store.get(task.id).attempts == 0
