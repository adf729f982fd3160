"""Throttling is its own outcome: `Retry-After` parsed and bounded, a throttled write is neither
rejected nor unknown and is sent once, a throttled read waits out a short delay and parks on a
long one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.tools import (
    MAX_RETRY_AFTER_S,
    AdapterResult,
    Ok,
    Rejected,
    ServiceFailed,
    ServiceThrottled,
    Throttled,
    ToolCall,
    ToolOutcome,
    classify,
    parse_retry_after,
)
from agent_jobs.tools.throttle import retry_after_of
from tests.unit.test_tools_executor import CTX, READ_CTX, REFUND, Rig, refund_call

NOW = datetime(2026, 3, 14, 10, 11, 17, tzinfo=UTC)


def http_date(when: datetime) -> str:
    return when.strftime("%a, %d %b %Y %H:%M:%S GMT")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2", 2.0),
        (" 120 ", 120.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("-5", 0.0),  # negative: no wait, not a wait into the past
        ("99999999999", MAX_RETRY_AFTER_S),
        ("9" * 60, MAX_RETRY_AFTER_S),  # 9e59 seconds: clamped, not an overflow
        (http_date(NOW + timedelta(seconds=30)), 30.0),
        (http_date(NOW - timedelta(days=1)), 0.0),  # a date in the past
        (http_date(NOW + timedelta(days=400)), MAX_RETRY_AFTER_S),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        ("1e3", None),
        ("", None),
        ("   ", None),
        ("9" * 65, None),  # longer than any real value: garbage
        (None, None),
        ("Mon, 99 Foo 2026 99:99:99 GMT", None),
    ],
)
def test_retry_after_is_parsed_and_clamped(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


@given(st.text(max_size=80))
def test_retry_after_never_raises_and_stays_in_range(value: str) -> None:
    got = parse_retry_after(value, NOW)
    assert got is None or 0.0 <= got <= MAX_RETRY_AFTER_S


def test_an_http_date_is_measured_against_the_responses_date_not_our_clock() -> None:
    served = NOW - timedelta(hours=2)  # our clock is two hours ahead of the server's
    headers = {
        "Retry-After": http_date(served + timedelta(seconds=10)),
        "Date": http_date(served),
    }
    assert retry_after_of(headers, NOW) == 10.0
    assert retry_after_of({"Retry-After": "7", "Date": "garbage"}, NOW) == 7.0
    assert retry_after_of({"Retry-After": http_date(NOW + timedelta(seconds=4))}, NOW) == 4.0


def test_throttled_is_its_own_outcome_for_reads_and_writes() -> None:
    exc = ServiceThrottled("rate_limited", "slow down", retry_after_s=2.0, status=429)
    expected = Throttled(retry_after_s=2.0, code="rate_limited", message="slow down", status=429)
    assert classify(exc, write=True) == expected
    assert classify(exc, write=False) == expected
    # and it survives the trip through the tagged union the orchestrator stores
    from pydantic import TypeAdapter

    assert TypeAdapter(ToolOutcome).validate_python(expected.model_dump()) == expected


def test_a_throttled_write_is_sent_once_not_retried_and_not_unknown() -> None:
    throttled = ServiceThrottled("rate_limited", retry_after_s=2.0, status=429)
    rig = Rig(write=[throttled, AdapterResult(REFUND, 201)])
    out = rig.executor.execute(refund_call(), CTX)
    assert out == Throttled(retry_after_s=2.0, code="rate_limited", status=429)
    assert rig.write.calls == 1 and rig.sleeps == []
    record = rig.audit.records[-1]
    assert (record.outcome, record.code) == ("throttled", "rate_limited")
    # The same call, same key, later: applied.
    assert isinstance(rig.executor.execute(refund_call(), CTX), Ok)
    assert [i.idempotency_key for i in rig.write.invocations] == [refund_call().idempotency_key] * 2


def test_a_throttled_read_waits_a_short_retry_after_then_answers() -> None:
    rig = Rig(read=[ServiceThrottled("rate_limited", retry_after_s=1.25), {"order_id": "o"}])
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert out == Ok(result={"order_id": "o"})
    assert rig.sleeps == [1.25]  # the service's delay, not the policy's 0.5 s backoff


def test_a_throttled_read_without_a_hint_backs_off_per_its_policy() -> None:
    rig = Rig(read=[ServiceThrottled("rate_limited", retry_after_s=None), {"order_id": "o"}])
    rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert rig.sleeps == [0.5]


def test_a_long_retry_after_is_not_waited_out_in_the_worker() -> None:
    rig = Rig(read=[ServiceThrottled("rate_limited", retry_after_s=60.0), {"order_id": "o"}])
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert out == Throttled(retry_after_s=60.0, code="rate_limited")
    assert rig.read.calls == 1 and rig.sleeps == []


def test_a_read_throttled_on_every_attempt_ends_throttled() -> None:
    rig = Rig(read=[ServiceThrottled("rate_limited", retry_after_s=0.1)])
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert isinstance(out, Throttled) and rig.read.calls == 3


def test_an_unusable_2xx_is_a_clear_read_error_not_retried() -> None:
    failure = ServiceFailed("response_too_large", "more than 1048576 bytes", transient=False)
    rig = Rig(read=[failure, {"order_id": "o"}])
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert out == Rejected(code="response_too_large", message="more than 1048576 bytes")
    assert rig.read.calls == 1


def test_results_of_any_adapter_are_cleaned_of_nul_and_lone_surrogates() -> None:
    rig = Rig(read=[{"note\x00": ["a\ud800b", {"k": "\x00"}], "ok": "\u202e kept"}])
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert out == Ok(result={"note\ufffd": ["a\ufffdb", {"k": "\ufffd"}], "ok": "\u202e kept"})
