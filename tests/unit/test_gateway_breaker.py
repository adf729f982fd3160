"""Circuit breaker state machine, on a clock the tests move by hand."""

from __future__ import annotations

import threading

import pytest

from agent_jobs.core.clock import FixedClock
from agent_jobs.gateway.breaker import BreakerState, CircuitBreaker, Permit
from agent_jobs.gateway.errors import ModelUnavailable
from agent_jobs.gateway.routes import BreakerConfig

CFG = BreakerConfig(open_after_failures=5, window_s=30, half_open_after_s=20)


def state(breaker: CircuitBreaker) -> BreakerState:
    """Read through a call: mypy would otherwise narrow the property between asserts."""
    return breaker.state


def fail(breaker: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        breaker.record_failure(breaker.acquire())


def opened() -> tuple[CircuitBreaker, FixedClock]:
    clock = FixedClock()
    breaker = CircuitBreaker(CFG, clock, name="r/primary")
    fail(breaker, 5)
    return breaker, clock


def test_stays_closed_below_threshold_and_opens_at_it() -> None:
    clock = FixedClock()
    breaker = CircuitBreaker(CFG, clock)
    fail(breaker, 4)
    assert state(breaker) is BreakerState.CLOSED
    breaker.acquire()  # still lets calls through
    fail(breaker)
    assert state(breaker) is BreakerState.OPEN


def test_open_fails_fast_with_time_to_probe() -> None:
    breaker, clock = opened()
    with pytest.raises(ModelUnavailable) as err:
        breaker.acquire()
    assert err.value.reason == "breaker_open"
    assert err.value.retry_after_s == 20
    assert err.value.retryable
    clock.advance(5)
    with pytest.raises(ModelUnavailable) as err:
        breaker.acquire()
    assert err.value.retry_after_s == 15


def test_failures_older_than_the_window_do_not_count() -> None:
    clock = FixedClock()
    breaker = CircuitBreaker(CFG, clock)
    fail(breaker)
    clock.advance(30)
    fail(breaker, 4)
    assert state(breaker) is BreakerState.CLOSED
    fail(breaker)  # five within the last 30 s now
    assert state(breaker) is BreakerState.OPEN


def test_failures_within_the_window_count_even_with_successes_between() -> None:
    clock = FixedClock()
    breaker = CircuitBreaker(CFG, clock)
    for _ in range(5):
        breaker.record_success(breaker.acquire())
        fail(breaker)
        clock.advance(5)
    assert state(breaker) is BreakerState.OPEN


def test_half_open_lets_exactly_one_probe_through() -> None:
    breaker, clock = opened()
    clock.advance(20)
    assert state(breaker) is BreakerState.HALF_OPEN
    probe = breaker.acquire()
    assert probe.probe
    with pytest.raises(ModelUnavailable) as err:
        breaker.acquire()
    assert err.value.reason == "breaker_open"
    assert err.value.retry_after_s is None


def test_probe_success_closes() -> None:
    breaker, clock = opened()
    clock.advance(20)
    breaker.record_success(breaker.acquire())
    assert state(breaker) is BreakerState.CLOSED
    assert not breaker.acquire().probe
    fail(breaker, 4)  # the failure count started again from zero
    assert state(breaker) is BreakerState.CLOSED


def test_probe_failure_reopens_for_another_wait() -> None:
    breaker, clock = opened()
    clock.advance(25)
    breaker.record_failure(breaker.acquire())
    assert state(breaker) is BreakerState.OPEN
    with pytest.raises(ModelUnavailable) as err:
        breaker.acquire()
    assert err.value.retry_after_s == 20
    clock.advance(20)
    assert breaker.acquire().probe


def test_a_straggler_result_does_not_decide_the_probe() -> None:
    clock = FixedClock()
    breaker = CircuitBreaker(CFG, clock)
    straggler = breaker.acquire()  # a slow call started while closed
    fail(breaker, 5)
    clock.advance(20)
    probe = breaker.acquire()
    breaker.record_success(straggler)
    assert state(breaker) is BreakerState.HALF_OPEN
    breaker.record_failure(straggler)
    assert state(breaker) is BreakerState.HALF_OPEN
    breaker.record_success(probe)
    assert state(breaker) is BreakerState.CLOSED


def test_stale_permits_from_before_a_reset_do_not_count() -> None:
    breaker, clock = opened()
    clock.advance(20)
    old = [Permit(generation=0, probe=False)] * 10
    breaker.record_success(breaker.acquire())
    for permit in old:
        breaker.record_failure(permit)
    assert state(breaker) is BreakerState.CLOSED


def test_concurrent_callers_get_one_probe() -> None:
    breaker, clock = opened()
    clock.advance(20)
    barrier = threading.Barrier(16)
    probes: list[Permit] = []
    refused: list[ModelUnavailable] = []
    lock = threading.Lock()

    def call() -> None:
        barrier.wait()
        try:
            permit = breaker.acquire()
        except ModelUnavailable as exc:
            with lock:
                refused.append(exc)
            return
        with lock:
            probes.append(permit)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(probes) == 1 and probes[0].probe
    assert len(refused) == 15


def test_concurrent_failures_open_once_and_count_exactly() -> None:
    clock = FixedClock()
    breaker = CircuitBreaker(
        BreakerConfig(open_after_failures=40, window_s=30, half_open_after_s=20), clock
    )
    permits = [breaker.acquire() for _ in range(39)]
    threads = [threading.Thread(target=breaker.record_failure, args=(p,)) for p in permits]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state(breaker) is BreakerState.CLOSED
    fail(breaker)
    assert state(breaker) is BreakerState.OPEN
