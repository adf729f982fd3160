"""Armed faults are consumed one per matching request, oldest first; the request log waits."""

from __future__ import annotations

import threading

import pytest
from pydantic import ValidationError

from agent_jobs.sim.faults import FaultBoard
from agent_jobs.sim.models import FaultRequest
from agent_jobs.sim.request_log import RequestLog


def arm(board: FaultBoard, operation: str, fault: str, **kw: object) -> None:
    board.arm(FaultRequest.model_validate({"operation": operation, "fault": fault, **kw}))


def test_faults_are_consumed_times_then_gone() -> None:
    board = FaultBoard()
    arm(board, "refunds.create", "error_before_commit", times=2)
    assert board.take("orders.get") is None
    first = board.take("refunds.create")
    assert first is not None and first.kind == "error_before_commit" and first.remaining == 1
    assert board.take("refunds.create") is not None
    assert board.take("refunds.create") is None
    assert board.armed() == []


def test_faults_for_one_operation_apply_oldest_first() -> None:
    board = FaultBoard()
    arm(board, "refunds.create", "delay", delay_s=0.01)
    arm(board, "refunds.create", "drop_after_commit")
    kinds = [board.take("refunds.create"), board.take("refunds.create")]
    assert [f.kind if f else None for f in kinds] == ["delay", "drop_after_commit"]


def test_clear_reports_what_was_armed() -> None:
    board = FaultBoard()
    arm(board, "orders.get", "error_after_commit")
    arm(board, "payments.list", "error_after_commit")
    assert board.clear() == 2 and board.armed() == []


@pytest.mark.parametrize(
    "body",
    [
        {"operation": "refunds.create", "fault": "delay"},
        {"operation": "refunds.create", "fault": "drop_after_commit", "delay_s": 1},
        {"operation": "admin.reset", "fault": "drop_after_commit"},
        {"operation": "refunds.create", "fault": "explode"},
        {"operation": "refunds.create", "fault": "drop_after_commit", "times": 0},
        {"operation": "refunds.create", "fault": "delay", "delay_s": 999},
    ],
)
def test_bad_fault_requests_are_rejected(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FaultRequest.model_validate(body)


def test_request_log_waits_for_completed_requests_only() -> None:
    log = RequestLog()
    entry = log.begin(
        received_at="t",
        method="POST",
        path="/refunds",
        query={},
        operation="refunds.create",
        idempotency_key="k",
        authorization="Bearer abc",
        body=None,
    )
    assert log.entries()[0]["outcome"] == "in_flight"
    assert log.entries()[0]["authorization"] is True
    assert "abc" not in str(log.entries())
    assert not log.wait_for(1, "refunds.create", timeout=0)
    done = threading.Event()

    def waiter() -> None:
        if log.wait_for(1, "refunds.create", timeout=10):
            done.set()

    t = threading.Thread(target=waiter)
    t.start()
    log.finish(entry, outcome="dropped", status=None, error_code=None, fault="drop_after_commit")
    t.join()
    assert done.is_set()
    assert log.wait_idle(timeout=0)
