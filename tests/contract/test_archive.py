"""Bounded growth (issue 14, item 4): finished tasks past their retention are archived to
gzip'd JSON Lines and pruned with everything hanging off them, in batches, oldest first; live
tasks and recent ones are never touched. Both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.orchestrator.archive import read_archive
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.store.schema import effects, task_events, tasks
from agent_jobs.store.types import db_now_plus
from agent_jobs.testing import TEST_SETTINGS, Harness
from agent_jobs.workflows.noop import NoopWorkflow
from tests.contract.test_step_failures import Scripted

DAY = 86_400.0


def finished_tasks(h: Harness, tenant: str, n: int, workflow: str = "scripted@1") -> list[str]:
    ids = []
    for i in range(n):
        task = h.submit(tenant, f"k{i}", TaskRequest(workflow=workflow))
        assert h.settle(task.id).status is Status.COMPLETED
        ids.append(task.id)
    return ids


def age(store: Any, ids: list[str], days: float, *, lived_days: float = 0.01) -> None:
    """Move the tasks back in time: finished `days` ago, created `lived_days` before that."""
    with store.tx() as conn:
        conn.execute(
            update(tasks)
            .where(tasks.c.id.in_(ids))
            .values(
                updated_at=db_now_plus(-days * DAY),
                created_at=db_now_plus(-(days + lived_days) * DAY),
            )
        )


def count(store: Any, table: Any, ids: list[str]) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(table).where(table.c.task_id.in_(ids))
            ).scalar_one()
        )


def test_old_finished_tasks_are_archived_then_pruned_and_nothing_else_is(
    store: Any, tenant: str, tmp_path: Path
) -> None:
    registry = WorkflowRegistry()
    registry.register(Scripted())
    registry.register(NoopWorkflow())
    settings = TEST_SETTINGS.with_overrides(
        task_retention_days=30.0, archive_dir=str(tmp_path / "archive"), sweep_batch=2
    )
    h = Harness(store, registry, settings)
    old = finished_tasks(h, tenant, 5)
    recent = finished_tasks(h, tenant + "x", 1)
    live = h.submit(tenant, "live", TaskRequest(workflow="noop@1", input={"steps": 3}))
    age(store, old, 31)
    age(store, [live.id], 400)  # old, but not finished: never pruned
    assert count(store, task_events, old) > 0 and count(store, effects, old) == 5

    assert h.sweepers.run("archive") == 5  # three batches of at most two

    assert count(store, task_events, old) == 0 and count(store, effects, old) == 0
    with store.engine.connect() as conn:
        left = {r[0] for r in conn.execute(select(tasks.c.id))}
    assert left == {*recent, live.id}
    archived = read_archive(tmp_path / "archive")
    assert sorted(r["task"]["id"] for r in archived) == sorted(old)
    one = next(r for r in archived if r["task"]["id"] == old[0])
    assert one["task"]["status"] == "COMPLETED"
    assert [e["type"] for e in one["events"]][-1] == "completed"
    assert one["effects"][0]["status"] == "committed"
    assert len(list((tmp_path / "archive").glob("*.jsonl.gz"))) == 3
    assert not list((tmp_path / "archive").glob("*.part"))
    assert h.sweepers.run("archive") == 0  # idempotent


def test_a_failed_archive_write_deletes_nothing(store: Any, tenant: str, tmp_path: Path) -> None:
    registry = WorkflowRegistry()
    registry.register(Scripted())
    h = Harness(store, registry)
    old = finished_tasks(h, tenant, 2)
    age(store, old, 31)

    def broken(records: list[dict[str, Any]]) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.prune_finished(30 * DAY, 10, broken)
    assert count(store, task_events, old) > 0
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(tasks)).scalar_one() == 2


def test_retention_zero_keeps_everything(store: Any, tenant: str, tmp_path: Path) -> None:
    registry = WorkflowRegistry()
    registry.register(Scripted())
    settings = TEST_SETTINGS.with_overrides(task_retention_days=0.0, archive_dir="none")
    h = Harness(store, registry, settings)
    old = finished_tasks(h, tenant, 1)
    age(store, old, 3650)
    assert h.sweepers.run("archive") == 0
    assert store.get(old[0]).status is Status.COMPLETED


def test_a_task_that_lived_across_the_cutoff_is_kept_until_its_finish_is_due(
    store: Any, tenant: str, tmp_path: Path
) -> None:
    """The prune walks finished tasks by creation (the index that keeps read steps HOT): one
    created 40 days ago that finished 10 days ago is not due until 30 days after it finished."""
    registry = WorkflowRegistry()
    registry.register(Scripted())
    settings = TEST_SETTINGS.with_overrides(
        task_retention_days=30.0, archive_dir=str(tmp_path / "archive")
    )
    h = Harness(store, registry, settings)
    long_lived = finished_tasks(h, tenant, 1)
    age(store, long_lived, 10, lived_days=30)
    assert h.sweepers.run("archive") == 0
    age(store, long_lived, 31, lived_days=30)
    assert h.sweepers.run("archive") == 1
