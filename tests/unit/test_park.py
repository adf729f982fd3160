"""The park reason of a task in RETRY_WAIT (`core.park`, invariant 12): the entry, its meaning,
the rows an earlier release parked (derived once, by `from_legacy`), and the read surfaces that
show it (the task view, the API's task, the CLI's `status`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agent_jobs.api.models import Task
from agent_jobs.cli.output import task_text
from agent_jobs.core.contracts import TaskView
from agent_jobs.core.park import (
    MEANING,
    PARK_KEY,
    THROTTLES_KEY,
    Park,
    ParkReason,
    current_runtime,
    from_legacy,
    park_of,
    shown_park,
)
from agent_jobs.core.states import RESUMABLE, DisplayStatus, Status

S = Status
R = ParkReason
PENDING = {
    "tool": "ledger.pay",
    "tool_version": "1",
    "args": {"n": 1},
    "idempotency_key": "pay:1",
}


def test_every_reason_says_what_it_waits_for_and_what_it_does_on_waking() -> None:
    assert set(MEANING) == set(ParkReason)
    for reason, meaning in MEANING.items():
        assert meaning.waits_for and meaning.on_waking and meaning.resumes, reason
        assert meaning.resumes <= RESUMABLE, "a park never wakes into a status it cannot resume"


@pytest.mark.parametrize(
    ("reason", "resume"),
    [
        (R.RETRY, S.RUNNING),
        (R.VERIFY_ERROR, S.VERIFYING),
        (R.THROTTLED, S.EXECUTING),
        (R.HELD_BY_OPERATOR, S.EXECUTING),
    ],
)
def test_a_reason_fixes_where_waking_leads(reason: ParkReason, resume: Status) -> None:
    park = Park.of(reason, "why")
    assert park.resume is resume
    assert park.entry() == {"reason": reason.value, "resume": resume.value, "detail": "why"}
    assert Park.model_validate(park.entry()) == park
    with pytest.raises(ValidationError):
        Park(reason=reason, resume=S.RECEIVED)


def test_a_failed_step_names_the_status_it_resumes_and_nothing_terminal() -> None:
    for status in RESUMABLE:
        assert Park.of(R.STEP_FAILED, "Boom", resume=status).resume is status
    with pytest.raises(ValidationError):
        Park(reason=R.STEP_FAILED, resume=S.COMPLETED)
    with pytest.raises(ValidationError):
        Park.model_validate({"reason": "retry", "resume": "RUNNING", "extra": 1})


def test_only_a_resend_or_a_park_with_nothing_in_flight_may_be_cancelled() -> None:
    assert Park.of(R.THROTTLED).cancellable and Park.of(R.THROTTLED).resends
    assert Park.of(R.HELD_BY_OPERATOR).resends
    assert Park.of(R.RETRY).cancellable and not Park.of(R.RETRY).resends
    assert Park.of(R.STEP_FAILED, resume=S.RUNNING).cancellable
    unknown = Park.of(R.STEP_FAILED, resume=S.EXECUTING)
    assert not unknown.cancellable and not unknown.resends


def test_a_park_exists_only_in_retry_wait() -> None:
    entry = {PARK_KEY: Park.of(R.RETRY).entry()}
    assert park_of(S.RETRY_WAIT, entry) == Park.of(R.RETRY)
    for status in set(Status) - {S.RETRY_WAIT}:
        assert park_of(status, entry) is None
    assert shown_park(S.RETRY_WAIT, {PARK_KEY: {"reason": "napping"}}) is None
    with pytest.raises(ValueError):
        park_of(S.RETRY_WAIT, {PARK_KEY: {"reason": "napping"}})


# -- rows an earlier release parked -------------------------------------------------------------

THROTTLE = {"count": 2, "waited_s": 1.5, "reason": "429 slow down"}


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        ({}, Park.of(R.RETRY, "parked by an earlier release")),
        ({"resume": "VERIFYING"}, Park.of(R.STEP_FAILED, "", resume=S.VERIFYING)),
        ({"resume": "VERIFYING", "verify_failures": 2}, Park.of(R.VERIFY_ERROR)),
        ({"resume": "RECEIVED"}, Park.of(R.STEP_FAILED, resume=S.RECEIVED)),
        ({"resume": "garbage"}, Park.of(R.STEP_FAILED, resume=S.RUNNING)),
        ({"throttle": THROTTLE, "pending_action": PENDING}, Park.of(R.THROTTLED, "429 slow down")),
        (
            {"throttle": {**THROTTLE, "by_operator": True}, "pending_action": PENDING},
            Park.of(R.HELD_BY_OPERATOR, "429 slow down"),
        ),
        # D1's row: a step failed in EXECUTING after a throttle. Reconciled, never resent.
        (
            {"resume": "EXECUTING", "throttle": THROTTLE, "pending_action": PENDING},
            Park.of(R.STEP_FAILED, resume=S.EXECUTING),
        ),
        (
            {"resume": "EXECUTING", "pending_action": PENDING},
            Park.of(R.STEP_FAILED, resume=S.EXECUTING),
        ),
        # A stale resume with nothing in flight: an ordinary retry, not a lost lease to escalate.
        ({"resume": "EXECUTING", "pending_action": None}, Park.of(R.RETRY)),
        # A throttle record without its pending action resends nothing.
        ({"throttle": THROTTLE, "pending_action": None}, Park.of(R.RETRY)),
    ],
)
def test_an_earlier_releases_row_gets_the_reason_its_keys_meant(
    runtime: dict[str, Any], expected: Park
) -> None:
    park = from_legacy(runtime)
    assert (park.reason, park.resume) == (expected.reason, expected.resume)
    if expected.detail == "429 slow down":
        assert park.detail == expected.detail
    assert park_of(S.RETRY_WAIT, runtime) == park, "park_of derives it when no entry is there"


LEGACY = st.fixed_dictionaries(
    {},
    optional={
        "resume": st.sampled_from([s.value for s in Status] + ["garbage", None]),
        "throttle": st.one_of(
            st.none(),
            st.just({}),
            st.fixed_dictionaries(
                {"count": st.integers(0, 9), "waited_s": st.floats(0, 99)},
                optional={"reason": st.text(max_size=300), "by_operator": st.booleans()},
            ),
        ),
        "pending_action": st.one_of(st.none(), st.just(PENDING)),
        "verify_failures": st.integers(0, 3),
        "steps": st.integers(0, 9),
    },
)


@given(runtime=LEGACY, status=st.sampled_from(list(Status)))
def test_any_earlier_row_is_read_in_the_current_shape_and_never_resent_on_a_guess(
    runtime: dict[str, Any], status: Status
) -> None:
    current = current_runtime(status, runtime)
    assert "resume" not in current and "throttle" not in current
    assert current_runtime(status, current) == current, "folding is done once"
    assert current.get("steps") == runtime.get("steps")
    if status is S.RETRY_WAIT:
        park = park_of(status, current)
        assert park is not None and park == from_legacy(runtime)
        assert len(park.detail) <= 200
        if park.resends:
            assert runtime.get("pending_action") and runtime.get("throttle"), "as the old code read"
            assert runtime.get("resume") != "EXECUTING", "a maybe-sent effect is never resent"
            assert current[THROTTLES_KEY]["count"] == runtime["throttle"].get("count", 0)
        if runtime.get("resume") == "EXECUTING" and runtime.get("pending_action"):
            assert not park.cancellable, "reconciled before any cancel ends it"
    else:
        assert PARK_KEY not in current


# -- the read surfaces --------------------------------------------------------------------------


def view(park: Park | None, status: Status = S.RETRY_WAIT) -> TaskView:
    at = datetime(2026, 3, 14, tzinfo=UTC)
    return TaskView(
        task_id="tsk_1",
        tenant_id="acme",
        status=status,
        display_status=DisplayStatus.RETRY_WAIT,
        workflow="example@1",
        version=3,
        attempts=1,
        cancel_requested=False,
        trace_id="0" * 32,
        created_at=at,
        updated_at=at,
        park=park,
    )


def test_the_api_and_the_cli_say_why_a_task_waits() -> None:
    park = Park.of(R.THROTTLED, "429 from refunds.example (acct alice@example.com)")
    task = Task.from_view(view(park))
    assert task.park is not None
    assert (task.park.reason, task.park.resume) == (R.THROTTLED, S.EXECUTING)
    assert task.park.waits_for == MEANING[R.THROTTLED].waits_for
    assert "alice@example.com" not in task.park.detail, "the detail is redacted"
    text = task_text(view(park))
    assert "parked     throttled: waits for the provider's Retry-After" in text
    assert "(EXECUTING)" in text and "alice@example.com" in text  # operators read it raw
    assert Task.from_view(view(None, S.RUNNING)).park is None
    assert "parked" not in task_text(view(None, S.RUNNING))
