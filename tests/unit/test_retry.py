"""Backoff arithmetic for RETRY_WAIT timers (invariant 6 keeps them in the DB; this sets them)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.core.retry import backoff_s

attempts = st.integers(min_value=1, max_value=200)
bases = st.floats(min_value=0.001, max_value=60.0)
caps = st.floats(min_value=0.001, max_value=3600.0)
jitters = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(attempts, bases, caps, jitters)
def test_backoff_stays_within_half_ceiling_and_ceiling(
    attempt: int, base: float, cap: float, jitter: float
) -> None:
    ceiling = min(cap, base * 2.0 ** (attempt - 1))
    delay = backoff_s(attempt, base, cap, jitter)
    assert ceiling / 2 <= delay <= ceiling
    assert delay <= cap
    assert delay > 0  # equal jitter keeps a floor: a retry never fires at once


@given(attempts, bases, caps, jitters)
def test_backoff_never_shrinks_as_attempts_grow(
    attempt: int, base: float, cap: float, jitter: float
) -> None:
    assert backoff_s(attempt + 1, base, cap, jitter) >= backoff_s(attempt, base, cap, jitter)


@given(attempts, bases, caps, jitters, jitters)
def test_more_jitter_never_means_less_delay(
    attempt: int, base: float, cap: float, j1: float, j2: float
) -> None:
    lo, hi = sorted((j1, j2))
    assert backoff_s(attempt, base, cap, lo) <= backoff_s(attempt, base, cap, hi)


def test_known_values() -> None:
    assert backoff_s(1, 2.0, 300.0, 0.0) == 1.0
    assert backoff_s(1, 2.0, 300.0, 0.5) == 1.5
    assert backoff_s(3, 2.0, 300.0, 0.0) == 4.0
    assert backoff_s(20, 2.0, 300.0, 0.0) == 150.0  # capped: half the cap is the floor
    assert backoff_s(20, 2.0, 300.0, 0.999) == pytest.approx(299.85)


def test_a_huge_attempt_number_is_capped_not_an_overflow() -> None:
    assert backoff_s(10_000, 2.0, 300.0, 0.0) == 150.0


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="from 1"):
        backoff_s(attempt, 1.0, 10.0, 0.0)


@pytest.mark.parametrize("jitter", [-0.01, 1.0, 1.5])
def test_jitter_must_be_a_fraction(jitter: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        backoff_s(1, 1.0, 10.0, jitter)
