"""The transition table of DESIGN.md and its guard (invariant 1 refuses what this table refuses)."""

from __future__ import annotations

import itertools

import pytest

from agent_jobs.core.errors import IllegalTransition
from agent_jobs.core.states import (
    EFFECT_IN_FLIGHT,
    PARKED,
    RUNNABLE,
    TERMINAL,
    TRANSITIONS,
    Status,
    can_cancel_now,
    check_transition,
    display_status,
    is_legal,
)

S = Status

# The README's "Task state machine" (DESIGN.md's, plus the failure and throttle parks of issue 9),
# transcribed independently of `states.py`: a change to either without the other fails
# `test_the_table_is_the_one_in_design_md`.
DESIGN_TABLE: dict[Status, set[Status]] = {
    S.RECEIVED: {S.RUNNING, S.RETRY_WAIT, S.CANCELLED, S.FAILED},
    S.RUNNING: {
        S.RUNNING,
        S.APPROVAL_WAIT,
        S.EXECUTING,
        S.VERIFYING,
        S.RETRY_WAIT,
        S.ESCALATED,
        S.FAILED,
        S.CANCELLED,
    },
    S.RETRY_WAIT: {
        S.RUNNING,
        S.RECEIVED,
        S.VERIFYING,
        S.EXECUTING,
        S.APPROVAL_WAIT,
        S.RETRY_WAIT,
        S.ESCALATED,
        S.FAILED,
        S.CANCELLED,
    },
    S.APPROVAL_WAIT: {S.EXECUTING, S.RUNNING, S.APPROVAL_WAIT, S.ESCALATED, S.FAILED, S.CANCELLED},
    # APPROVAL_WAIT: the grant ran out before the send (issue 29, simulator seed 53 on Postgres).
    S.EXECUTING: {
        S.VERIFYING,
        S.RUNNING,
        S.EXEC_UNKNOWN,
        S.RETRY_WAIT,
        S.APPROVAL_WAIT,
        S.ESCALATED,
        S.FAILED,
    },
    # The self-loop records a reconcile read that itself failed (see states.py).
    S.EXEC_UNKNOWN: {
        S.VERIFYING,
        S.RUNNING,
        S.EXECUTING,
        S.APPROVAL_WAIT,
        S.ESCALATED,
        S.EXEC_UNKNOWN,
    },
    S.VERIFYING: {S.COMPLETED, S.RUNNING, S.RETRY_WAIT, S.ESCALATED},
    S.COMPLETED: set(),
    S.ESCALATED: set(),
    S.FAILED: set(),
    S.CANCELLED: set(),
}

ALL_PAIRS = list(itertools.product(Status, Status))
LEGAL = [(a, b) for a, b in ALL_PAIRS if b in DESIGN_TABLE[a]]
ILLEGAL = [(a, b) for a, b in ALL_PAIRS if b not in DESIGN_TABLE[a]]


def _id(pair: tuple[Status, Status]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def test_the_table_is_the_one_in_design_md() -> None:
    assert set(TRANSITIONS) == set(Status)
    assert {k: set(v) for k, v in TRANSITIONS.items()} == DESIGN_TABLE


def test_pair_counts_cover_the_whole_square() -> None:
    # 11 statuses: 121 ordered pairs, 44 legal ones, the rest refused.
    assert len(ALL_PAIRS) == 121
    assert len(LEGAL) == 44
    assert len(ILLEGAL) == 121 - 44


@pytest.mark.parametrize("pair", ILLEGAL, ids=[_id(p) for p in ILLEGAL])
def test_every_pair_not_in_the_table_is_refused(pair: tuple[Status, Status]) -> None:
    frm, to = pair
    assert not is_legal(frm, to)
    with pytest.raises(IllegalTransition) as info:
        check_transition(frm, to)
    assert (info.value.frm, info.value.to) == (frm.value, to.value)
    assert info.value.code == "illegal_transition"


@pytest.mark.parametrize("pair", LEGAL, ids=[_id(p) for p in LEGAL])
def test_every_pair_in_the_table_is_allowed(pair: tuple[Status, Status]) -> None:
    frm, to = pair
    assert is_legal(frm, to)
    check_transition(frm, to)


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
def test_terminal_states_have_no_exits(terminal: Status) -> None:
    assert TRANSITIONS[terminal] == frozenset()
    for to in Status:
        with pytest.raises(IllegalTransition):
            check_transition(terminal, to)


def test_only_running_and_the_parked_statuses_loop_on_themselves() -> None:
    # A read step; a failed reconcile lookup; a failed step while parked (re-parked, backoff).
    loops = {s for s in Status if is_legal(s, s)}
    assert loops == {S.RUNNING, S.EXEC_UNKNOWN, S.APPROVAL_WAIT, S.RETRY_WAIT}


def test_status_sets_partition_the_states() -> None:
    assert {S.COMPLETED, S.ESCALATED, S.FAILED, S.CANCELLED} == TERMINAL
    assert {S.RETRY_WAIT, S.APPROVAL_WAIT} == PARKED
    assert set(Status) == RUNNABLE | PARKED | TERMINAL
    assert not (RUNNABLE & PARKED) and not (RUNNABLE & TERMINAL) and not (PARKED & TERMINAL)


def test_every_non_terminal_state_can_reach_a_terminal_one() -> None:
    for start in set(Status) - TERMINAL:
        seen, frontier = {start}, [start]
        while frontier:
            for nxt in TRANSITIONS[frontier.pop()] - seen:
                seen.add(nxt)
                frontier.append(nxt)
        assert seen & TERMINAL, start


def test_an_effect_in_flight_cannot_be_cancelled() -> None:
    """DESIGN.md: EXECUTING and EXEC_UNKNOWN are never cancelled mid-flight."""
    assert {S.EXECUTING, S.EXEC_UNKNOWN} == EFFECT_IN_FLIGHT
    for status in EFFECT_IN_FLIGHT:
        assert not can_cancel_now(status)
        assert not is_legal(status, S.CANCELLED)
    for status in {S.RECEIVED, S.RUNNING, S.RETRY_WAIT, S.APPROVAL_WAIT}:
        assert can_cancel_now(status)
    for status in TERMINAL:
        assert not can_cancel_now(status)


def test_unknown_never_fails_directly() -> None:
    """Invariant 4: EXEC_UNKNOWN exits only through reconcile outcomes, never to FAILED."""
    assert not is_legal(S.EXEC_UNKNOWN, S.FAILED)
    assert not is_legal(S.EXEC_UNKNOWN, S.COMPLETED)


def test_display_status() -> None:
    assert display_status(S.RUNNING, cancel_requested=True) == "cancel_requested"
    assert display_status(S.EXECUTING, cancel_requested=True) == "cancel_requested"
    assert display_status(S.CANCELLED, cancel_requested=True) == "cancelled"
    assert display_status(S.APPROVAL_WAIT, cancel_requested=False) == "awaiting_approval"
    assert display_status(S.EXEC_UNKNOWN, cancel_requested=False) == "confirming_effect"
    assert display_status(S.RETRY_WAIT, cancel_requested=False) == "retry_wait"
    assert display_status(S.RUNNING, False, held_for="paused") == "paused"
    assert display_status(S.RUNNING, False, held_for="gate") == "held_gate"
    assert display_status(S.COMPLETED, False, held_for="paused") == "completed"
    assert display_status(S.RETRY_WAIT, False, stopped_by_operator=True) == "stopped_by_operator"


def test_only_a_replay_leaves_failed_and_only_into_its_table() -> None:
    """The replay's transitions are declared (`REPLAY_TRANSITIONS`), not open: a step's patch
    can never leave FAILED, and a replay cannot leave any other terminal status."""
    from agent_jobs.core.errors import IllegalTransition
    from agent_jobs.core.states import REPLAY_TRANSITIONS, TERMINAL, check_transition

    for into in REPLAY_TRANSITIONS[Status.FAILED]:
        check_transition(Status.FAILED, into, replay=True)
        with pytest.raises(IllegalTransition):
            check_transition(Status.FAILED, into)
    for frm in TERMINAL - {Status.FAILED}:
        for into in Status:
            with pytest.raises(IllegalTransition):
                check_transition(frm, into, replay=True)
    with pytest.raises(IllegalTransition):
        check_transition(Status.FAILED, Status.COMPLETED, replay=True)
