"""A task an operator's lever holds asks again with backoff: at most about one ask (and its
writes) a minute after its first minute, on SQLite and Postgres.

Simulated time: each time the held task's timer falls due it is made due in SQL (never slept
through), the sweepers and the step run, and the clock advances by the interval the park set
(`next_attempt_at - updated_at`, both from the same statement). Before, every ask parked it for
the switches' poll interval, 2 s: about 300 asks (600 task events) in ten minutes of incident.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.holds import HELD_POLL_FIRST_S, held_poll_s
from agent_jobs.core.states import Status
from agent_jobs.ops.live import install
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.testing import Harness
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.example_backend import ExampleBackend
from tests.contract.test_ops_switches import switched

MINUTE = 60.0
INCIDENT_S = 10 * MINUTE


@pytest.fixture
def restore_switches() -> Iterator[None]:
    previous = install(StaticSwitches())
    yield
    install(previous)


@pytest.fixture
def held(store: Any, tmp_path: Path) -> tuple[Harness, ExampleBackend, str]:
    """A payout held by the tenant's stopped effects, parked after its first ask."""
    ledger = ExampleBackend(tmp_path / "ledger.db")
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ledger))
    h = Harness(store, registry)
    install(switched(effects_stopped=(("acme",), True)))
    payout = {"account": "acc_42", "amount_minor": 1500, "reads": 0}
    task = h.submit("acme", "held-1", TaskRequest(workflow="example@1", input=payout))
    h.run_until_idle()
    assert store.get(task.id).status is Status.RETRY_WAIT
    return h, ledger, task.id


def parked_for_s(store: Any, task_id: str) -> float:
    row = store.get(task_id)
    assert row.status is Status.RETRY_WAIT and row.next_attempt_at is not None
    return float((row.next_attempt_at - row.updated_at).total_seconds())


def ask_again(h: Harness, task_id: str) -> tuple[int, int]:
    """The held task's timer falls due: it asks the lever again. (events, version bumps)."""
    before = h.store.get(task_id)
    events = len(h.store.events(task_id))
    h.make_due(task_id)
    h.sweepers.all()
    h.run_until_idle()
    after = h.store.get(task_id)
    return len(h.store.events(task_id)) - events, after.version - before.version


@pytest.mark.usefixtures("restore_switches")
def test_a_held_task_writes_about_once_a_minute_after_its_first(
    store: Any, held: tuple[Harness, ExampleBackend, str]
) -> None:
    h, ledger, task_id = held
    clock, asks = 0.0, []  # (simulated second of the ask, events it wrote, versions)
    delays = [parked_for_s(store, task_id)]
    while clock + delays[-1] <= INCIDENT_S:
        clock += delays[-1]
        asks.append((clock, *ask_again(h, task_id)))
        delays.append(parked_for_s(store, task_id))
    assert delays[:7] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert all(d == MINUTE for d in delays[5:])
    # Every ask writes (a resend and a park: two events, two versions), so asks count writes.
    assert {(e, v) for _, e, v in asks} == {(2, 2)}
    # Asks at 2, 6, 14, 30 and 62 s, then 122, 182, ... 542 s: 13 in ten minutes, not ~300.
    assert [t for t, _, _ in asks] == [2, 6, 14, 30, 62, *range(122, 600, 60)]
    for minute in range(1, int(INCIDENT_S // MINUTE)):
        in_it = [t for t, _, _ in asks if minute * MINUTE < t <= (minute + 1) * MINUTE]
        assert len(in_it) <= 1, (minute, in_it)
    assert ledger.transfers() == []

    install(StaticSwitches())  # the lever is off: the next ask sends it
    ask_again(h, task_id)
    done = h.settle(task_id)
    assert done.status is Status.COMPLETED
    assert [t.idempotency_key for t in ledger.transfers()] == ["payout:acme:held-1"]


def test_the_interval_doubles_to_its_cap_and_starts_over() -> None:
    assert [held_poll_s(n, 60.0) for n in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert held_poll_s(1, 60.0) == HELD_POLL_FIRST_S  # a new hold (count reset) asks soon
    assert held_poll_s(10_000, 300.0) == 300.0
