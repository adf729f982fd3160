"""A dead letter's reason (an exception's message: it may quote anything a step held) shown to
someone who is not an operator goes through the API's redaction rule: addresses masked, the
value after a raw-data word (`password=`, `token:`, `Bearer`) replaced, NUL and lone surrogates
gone, bounded — whatever the reason holds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.api.models import Task
from agent_jobs.api.redaction import (
    REASON_MAX_CHARS,
    redact_event_data,
    redact_outcome,
    redact_text,
)
from agent_jobs.core.contracts import TaskView
from agent_jobs.core.states import Status

EMAIL = "asha.k+refunds@example-mail.co.uk"
SECRET = "s3cr3t-VALUE-9f8e"
SECRET_WORDS = ["password", "token", "secret", "authorization", "credential", "PASSWORD"]
noise = st.text(
    st.characters(codec="utf-8") | st.sampled_from("\x00\ud800 =:'\""),
    max_size=200,
)


def _leaks(text: str) -> list[str]:
    return [s for s in (EMAIL, SECRET, "example-mail") if s in text]


@settings(max_examples=300, deadline=None)
@given(
    before=noise,
    after=noise,
    word=st.sampled_from(SECRET_WORDS),
    sep=st.sampled_from(["=", ": ", " = ", ":", "\t:\t"]),
    quote=st.sampled_from(["", '"', "'"]),
    pad=st.integers(0, 2000),
)
def test_a_hostile_reason_shows_no_address_no_secret_and_is_bounded(
    *, before: str, after: str, word: str, sep: str, quote: str, pad: int
) -> None:
    # The secret and the address sit anywhere, also past the cut: redaction comes first.
    reason = (
        f"RuntimeError: {before} {'x' * pad} contact {EMAIL}, {word}{sep}{quote}{SECRET}{quote} "
        f"Authorization: Bearer {SECRET} {after}"
    )
    shown = redact_text(reason)
    assert _leaks(shown) == []
    assert "\x00" not in shown and not any(0xD800 <= ord(c) <= 0xDFFF for c in shown)
    assert len(shown) <= REASON_MAX_CHARS


@settings(max_examples=30, deadline=None)
@given(size=st.integers(200_000, 2_000_000), ch=st.sampled_from(["a", ".", "@", "=", "a@"]))
def test_megabytes_of_reason_are_redacted_and_cut(size: int, ch: str) -> None:
    """Linear: a run of address characters without an `@` is not rescanned from each position."""
    shown = redact_text(ch * (size // len(ch)) + f" {EMAIL}")
    assert len(shown) <= REASON_MAX_CHARS and _leaks(shown) == []


def _view(outcome: dict[str, Any]) -> TaskView:
    now = datetime.now(UTC)
    return TaskView(
        task_id="tsk_1", tenant_id="acme", status=Status.FAILED, display_status="failed",
        workflow="example@1", version=9, attempts=5, cancel_requested=False, trace_id="t",
        created_at=now, updated_at=now, outcome=outcome,
    )  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(before=noise)
def test_the_public_task_view_redacts_a_dead_letters_reason(before: str) -> None:
    raw = f"5 consecutive failed attempts; last: HTTPError: {before} token={SECRET} for {EMAIL}"
    outcome = {"reason": raw, "attempts": 5, "dead_letter": True}
    shown = Task.from_view(_view(outcome)).outcome
    assert shown is not None and shown["dead_letter"] is True and shown["attempts"] == 5
    assert _leaks(str(shown)) == []
    assert shown["reason"].startswith("5 consecutive failed attempts")
    # Only a dead letter's reason is rewritten: another outcome is shown as it was.
    plain = {"reply": f"we wrote to {EMAIL}", "verified": True}
    assert redact_outcome(plain) == plain


@settings(max_examples=100, deadline=None)
@given(before=noise, kind=st.sampled_from(["reason", "error", "last_error", "Reason"]))
def test_a_dead_lettered_or_failed_events_text_is_redacted(before: str, kind: str) -> None:
    """The event log (`GET /v1/tasks/{id}/events`) carries the same text: same rule."""
    data = {
        kind: f"OSError: {before} password={SECRET} <{EMAIL}>",
        "attempts": 5,
        "step": "RUNNING",
    }
    shown = redact_event_data(data)
    assert _leaks(str(shown)) == [] and shown["attempts"] == 5 and shown["step"] == "RUNNING"
    assert shown[kind].startswith("OSError: ")
