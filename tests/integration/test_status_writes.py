"""Invariant 1, watched where it happens: every statement that writes `tasks.status` during a
run of the real runtime comes from the transition path, on SQLite and Postgres.

tests/unit/test_rooms.py reads the source for the usual spellings; this one sees every
statement the database receives (`before_cursor_execute` on the store's engine, so a raw
`text(...)`, a Core `update()` keyed by column object, an `exec_driver_sql`, a CTE or a prepared
statement's `EXECUTE` all arrive here as SQL) and asks the Python stack where it came from.

Allowed: an UPDATE whose SET assigns `status` while `store/transition.py` is on the stack and
the innermost frame of the package is in `store/transition.py` or `store/backend/` (the backend
operation it called); an INSERT of a new row (its first status) from the backend's
`insert_task`. Anything else fails the run, naming the statement and the frames.

The run: the example workflow (to completion, and held by an operator's lever, then let go), a
cancel, a lease lost and swept, and the refund incident through its approval, with the sweepers.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text, update

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.gateway import ScriptedProvider
from agent_jobs.ops.live import install
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.store.backend import prepared
from agent_jobs.store.schema import tasks
from agent_jobs.testing import Harness
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.example_backend import ExampleBackend
from agent_jobs.workflows.refund import (
    WORKFLOW,
    Behaviour,
    RefundRules,
    RefundWorkflow,
    scripted_services,
)
from tests.contract.test_ops_switches import switched

PACKAGE = Path(__file__).resolve().parents[2] / "agent_jobs"
TRANSITION = "store/transition.py"
BACKEND = "store/backend/"

_TABLE = r'(?:"?\w+"?\.)?"?tasks"?(?=[\s("]|$)'
_UPDATE = re.compile(
    rf"\bUPDATE\s+(?:ONLY\s+)?{_TABLE}(?:\s+(?:AS\s+)?(?!SET\b)\w+)?\s+SET\b", re.I
)
_INSERT = re.compile(rf"\b(?:INSERT(?:\s+OR\s+\w+)?|REPLACE)\s+INTO\s+{_TABLE}\s*\(", re.I)
_UPSERT_SET = re.compile(r"\bDO\s+UPDATE\s+SET\b", re.I)
_EXECUTE = re.compile(r"^\s*EXECUTE\s+(\w+)", re.I)
_PREPARE = re.compile(r"^\s*PREPARE\s+(\w+)\s*(?:\([^)]*\))?\s+AS\s+(.*)$", re.I | re.S)
_ENDS_SET = re.compile(r"(?:WHERE|RETURNING|FROM)\b", re.I)


def _set_items(sql: str, start: int) -> list[str]:
    """The top-level items of the SET list starting at `start`: it ends at WHERE, RETURNING or
    FROM outside parentheses and quotes, or at the parenthesis that closes a CTE."""
    items, depth, quote, begin, i = [], 0, "", start, start
    while i < len(sql):
        ch = sql[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                break
        elif depth == 0 and ch == ",":
            items.append(sql[begin:i])
            begin = i + 1
        elif depth == 0 and (i == 0 or not sql[i - 1].isalnum()) and _ENDS_SET.match(sql, i):
            break
        i += 1
    items.append(sql[begin:i])
    return items


def _assigns_status(item: str) -> bool:
    """`status = ...`, `"status" = ...`, `tasks.status = ...` or `(version, status) = (...)`."""
    target = item.split("=", 1)[0] if "=" in item else ""
    names = re.findall(r'"?(\w+)"?\s*(?:[,)]|$)', target.strip().strip("()") + ",")
    return "status" in [n.lower() for n in names]


def writes_status(sql: str) -> str | None:
    """`"update"` or `"insert"` when `sql` writes `tasks.status`; None otherwise."""
    for m in _UPDATE.finditer(sql):
        if any(_assigns_status(i) for i in _set_items(sql, m.end())):
            return "update"
    insert = _INSERT.search(sql)
    if insert is not None:
        for m in _UPSERT_SET.finditer(sql):
            if any(_assigns_status(i) for i in _set_items(sql, m.end())):
                return "update"
        cols = sql[insert.end() :].split(")", 1)[0]
        if re.search(r'(?:^|,)\s*"?status"?\s*(?:,|$)', cols, re.I):
            return "insert"
    return None


def _package_frames() -> list[tuple[str, str]]:
    """(path inside the package, function) of every frame of agent_jobs, outermost first."""
    out = []
    for f in traceback.extract_stack():
        path = Path(f.filename)
        if PACKAGE in path.parents:
            out.append((path.relative_to(PACKAGE).as_posix(), f.name))
    return out


def allowed(kind: str, frames: list[tuple[str, str]]) -> bool:
    """A creation from the backend's `insert_task`, or an UPDATE from `store/transition.py`,
    with nothing but backend code between that frame and the statement."""
    if kind == "insert":  # a new row's first status, written where rows are created
        starts = [
            i for i, (p, f) in enumerate(frames) if p.startswith(BACKEND) and f == "insert_task"
        ]
    else:
        starts = [i for i, (p, _) in enumerate(frames) if p == TRANSITION]
    if not starts:
        return False
    return all(p == TRANSITION or p.startswith(BACKEND) for p, _ in frames[starts[-1] :])


@dataclass
class StatusWrites:
    """Every statement that wrote `tasks.status`, with where it came from."""

    allowed: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    prepared: dict[str, str] = field(default_factory=dict)

    def __call__(self, conn: Any, cursor: Any, sql: str, *_: Any) -> None:
        if m := _PREPARE.match(sql):
            self.prepared[m.group(1)] = m.group(2)
            return  # preparing writes nothing; its EXECUTE does
        if m := _EXECUTE.match(sql):
            name = m.group(1)
            known = prepared._BY_NAME.get(name)  # prepared before this watch began
            sql = self.prepared.get(name) or (known.body if known else sql)
        kind = writes_status(sql)
        if kind is None:
            return
        frames = _package_frames()
        line = f"{' '.join(sql.split())[:120]}  <- {' > '.join(f'{p}:{f}' for p, f in frames[-4:])}"
        (self.allowed if allowed(kind, frames) else self.stray).append(line)


@pytest.fixture
def watched(store: Any) -> Iterator[StatusWrites]:
    writes = StatusWrites()
    event.listen(store.engine, "before_cursor_execute", writes)
    try:
        yield writes
    finally:
        event.remove(store.engine, "before_cursor_execute", writes)


@pytest.fixture
def restore_switches() -> Iterator[None]:
    yield
    install(StaticSwitches())


def run_example(store: Any, tmp_path: Path) -> None:
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ExampleBackend(tmp_path / "ledger.db")))
    h = Harness(store, registry)
    payout = {"account": "acc_42", "amount_minor": 1500, "reads": 1}
    done = h.submit("acme", "ex-1", TaskRequest(workflow="example@1", input=payout))
    assert h.settle(done.id).status is Status.COMPLETED
    # Held by a lever (parked in RETRY_WAIT, asked again), then let go.
    install(switched(effects_stopped=(("acme",), True)))
    held = h.submit("acme", "ex-2", TaskRequest(workflow="example@1", input=payout))
    h.run_until_idle()
    h.make_due(held.id)
    h.sweepers.all()
    h.run_until_idle()
    assert store.get(held.id).status is Status.RETRY_WAIT
    install(StaticSwitches())
    assert h.settle(held.id).status is Status.COMPLETED
    # Cancelled at the next step boundary.
    cancelled = h.submit("acme", "ex-3", TaskRequest(workflow="example@1", input=payout))
    h.orchestrator.cancel(cancelled.id, "acme")
    assert h.settle(cancelled.id).status is Status.CANCELLED
    # A worker lost mid-step: its lease lapses and the sweeper moves the task on.
    lost = h.submit("acme", "ex-4", TaskRequest(workflow="example@1", input=payout))
    claimed = store.claim(lost.id, "w-dead:1", 30.0)
    assert claimed is not None
    h.publisher.queue.clear()
    h.expire_lease(lost.id)
    h.sweepers.all()
    assert h.settle(lost.id).status is Status.COMPLETED


def run_refund(store: Any) -> None:
    with SimServer(worlds.empty()) as sim:
        sim.admin.load(worlds.incident_8472())
        provider = ScriptedProvider(RefundRules(Behaviour()))
        registry = WorkflowRegistry()
        registry.register(RefundWorkflow(scripted_services(sim.base_url, provider=provider)))
        h = Harness(store, registry)
        message = "Order 8472 was charged twice, and my refund has not arrived."
        request = TaskRequest(workflow=WORKFLOW, input={"message": message, "channel": "chat"})
        task = h.submit("acme", "req-8472", request, requester="svc-support-chat")
        assert h.settle(task.id).status is Status.APPROVAL_WAIT
        [pending] = store.list_approvals("acme", status="pending", task_id=task.id)
        h.orchestrator.decide_approval(pending.approval_id, "lead-41", grant=True)
        assert h.settle(task.id).status is Status.COMPLETED
        assert len(sim.admin.refunds()) == 1


@pytest.mark.usefixtures("restore_switches")
def test_only_the_transition_path_writes_a_status_during_a_run(
    store: Any, watched: StatusWrites, tmp_path: Path
) -> None:
    run_example(store, tmp_path)
    run_refund(store)
    assert watched.stray == []
    # The watch saw the run: creations and transitions, through the backend's statements.
    assert any("insert_task" in w for w in watched.allowed)
    assert sum("transition.py:apply" in w for w in watched.allowed) >= 20


def test_a_status_written_anywhere_else_is_caught(store: Any, watched: StatusWrites) -> None:
    """The watch's own negative check: the same engine, statements from outside the path."""
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ExampleBackend(":memory:")))
    h = Harness(store, registry)
    task = h.submit("acme", "neg-1", TaskRequest(workflow="example@1", input={"account": "a"}))
    spellings = [
        text("UPDATE tasks SET status='FAILED' WHERE id=:id"),
        text('update "tasks" set "version" = version + 1, "status" = :s where "id" = :id'),
        text("UPDATE tasks SET (version, status) = (version + 1, :s) WHERE id = :id"),
        update(tasks).where(tasks.c.id == task.id).values({tasks.c.status: "FAILED"}),
    ]
    with store.engine.begin() as conn:
        for stmt in spellings:
            conn.execute(stmt, {"id": task.id, "s": "FAILED"})
        conn.exec_driver_sql("UPDATE tasks SET status = 'RUNNING' WHERE id = 'nobody'")
        # Touching the row without its status is not a status write.
        conn.execute(
            text(
                "UPDATE tasks SET held_since = CASE WHEN status = 'X' THEN NULL "
                "ELSE held_since END WHERE id=:id"
            ),
            {"id": task.id},
        )
    assert len(watched.stray) == len(spellings) + 1, watched.stray
    assert all("test_status_writes.py" not in w for w in watched.allowed)


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("UPDATE tasks SET status=$1, version=version+1 WHERE id=$2", "update"),
        ("WITH c AS (UPDATE public.tasks t SET version = 2, status = 'X' RETURNING 1) SELECT 1",
         "update"),
        ("INSERT INTO tasks (id, status) VALUES (1, 'RECEIVED')", "insert"),
        ("INSERT INTO tasks (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = 'X'",
         "update"),
        ("REPLACE INTO tasks (id, status) VALUES (1, 'X')", "insert"),
        ("UPDATE tasks SET lease_owner = NULL WHERE status = 'RUNNING'", None),
        ("UPDATE tasks SET state = '{\"status\": 1}' WHERE id = 1", None),
        ("UPDATE task_events SET status = 1", None),
        ("UPDATE effects SET status = 'committed' WHERE task_id IN (SELECT id FROM tasks)", None),
        ("INSERT INTO task_events (task_id, seq, type) VALUES (1, 2, 'x')", None),
    ],
)  # fmt: skip
def test_the_detector_reads_sql(sql: str, kind: str | None) -> None:
    assert writes_status(sql) == kind
