"""The transition table driven against the real store, on SQLite and Postgres, by a hypothesis
state machine (invariants 1, 2 and 6 under arbitrary interleavings).

Rules create tasks, claim them as one of two workers, commit any target status (legal or not)
under any lease ever handed out (current, superseded, or a zombie's), renew and release leases,
make leases lapse and timers fall due by rewriting them in SQL, run the lease sweeper and request
cancellation. A plain-Python model predicts each outcome; after every step the database must
agree with it exactly. Each example works in a fresh tenant of the same database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import func, select

from agent_jobs.core.errors import IllegalTransition, StaleTransition
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import (
    EFFECT_IN_FLIGHT,
    PARKED,
    RUNNABLE,
    TERMINAL,
    TRANSITIONS,
    Status,
    is_legal,
)
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.store import Lease, Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import task_events, tasks
from agent_jobs.store.types import db_now
from agent_jobs.testing import TEST_SETTINGS, LostBroker, RecordingPublisher
from tests.contract.support import action, expire_lease, intent, make_due, request

# Every step is a few real transactions, so shrinking a failure can take minutes (longer than
# the suite's per-test timeout): by default a failure is reported as found, thirty steps long.
# AGENT_JOBS_STATEFUL_SHRINK=1 shrinks it; AGENT_JOBS_STATEFUL_EXAMPLES=500 searches harder.
settings.register_profile(
    "store-machine",
    max_examples=int(os.environ.get("AGENT_JOBS_STATEFUL_EXAMPLES", "30")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    phases=[
        p for p in Phase if os.environ.get("AGENT_JOBS_STATEFUL_SHRINK") or p is not Phase.shrink
    ],
)
PROFILE = settings.get_profile("store-machine")

WORKERS = ("w1:1", "w2:2")
# A lapsed lease's retry timer is set in the future like the machine's own (`timer_falls_due`).
SWEEP_SETTINGS = TEST_SETTINGS.with_overrides(retry_base_s=3600.0, retry_max_s=7200.0)
ACT = action()


@dataclass
class Model:
    """What the store must hold for one task."""

    status: Status = Status.RECEIVED
    version: int = 1
    epoch: int = 0
    owner: str | None = None
    lease_live: bool = False
    timer: str = "none"  # none | future | due
    cancel: bool = False
    transitions: int = 0
    other_events: int = 0
    attempts: int = 0
    leases: list[Lease] = field(default_factory=list)
    claim_epochs: list[int] = field(default_factory=list)

    def claimable(self) -> bool:
        lease_free = self.owner is None or not self.lease_live
        return self.status not in TERMINAL and lease_free and self.timer != "future"

    def holds(self, lease: Lease) -> bool:
        """`lease` is the one the database would accept a commit from."""
        return (lease.owner, lease.epoch, lease.version) == (self.owner, self.epoch, self.version)


def _some(predicate: Callable[[Model], bool]) -> Callable[[StoreMachine], bool]:
    """Precondition: some task of this example is in a state the rule can act on."""
    return lambda machine: any(predicate(m) for m in machine.model.values())


def _open(m: Model) -> bool:
    return m.status not in TERMINAL


def _has_lease(m: Model) -> bool:
    return bool(m.leases)


def _superseded(m: Model) -> bool:
    """Some lease handed out for this task is no longer the one the database holds."""
    return any((lease.owner, lease.epoch) != (m.owner, m.epoch) for lease in m.leases)


def _lease_live(m: Model) -> bool:
    return m.owner is not None and m.lease_live


def _lease_lapsed(m: Model) -> bool:
    return m.owner is not None and not m.lease_live


def _timer_future(m: Model) -> bool:
    return m.timer == "future"


class StoreMachine(RuleBasedStateMachine):
    store: Store  # set by `machine_for`

    def __init__(self) -> None:
        super().__init__()
        self.tenant = f"sm{uuid.uuid4().hex[:12]}"
        self.model: dict[str, Model] = {}

    def pick(self, data: st.DataObject, predicate: Callable[[Model], bool] = bool) -> str:
        """A task of this example for which `predicate` holds (a precondition ensured one)."""
        # Creation order, not id order: ids made in the same millisecond sort at random, and a
        # replayed example must pick the same task.
        ids = [t for t, m in self.model.items() if predicate(m)]
        return data.draw(st.sampled_from(ids), label="task")

    # -- rules ----------------------------------------------------------------------------------

    @initialize()
    def first_task(self) -> None:
        self._create()

    # A few open tasks at a time, so that thirty steps take some of them deep into the table.
    @precondition(lambda self: sum(map(_open, self.model.values())) < 3)
    @rule()
    def create(self) -> None:
        self._create()

    def _create(self) -> None:
        result = self.store.create_or_get(
            self.tenant, uuid.uuid4().hex, request(len(self.model)), requester="svc:machine"
        )
        assert result.created
        self.model[result.task.id] = Model()

    @rule(owner=st.sampled_from(WORKERS), data=st.data())
    def claim(self, owner: str, data: st.DataObject) -> None:
        self._claim(self.pick(data), owner)

    def _claim(self, task_id: str, owner: str) -> Lease | None:
        m = self.model[task_id]
        expected = m.claimable()
        lease = self.store.claim(task_id, owner, 600.0)
        assert (lease is not None) == expected, (m, lease)
        event(f"claim {'taken' if lease else 'refused'}")
        if lease is None:
            return None
        m.epoch += 1
        assert lease.epoch == m.epoch and lease.version == m.version
        m.owner, m.lease_live = owner, True
        m.leases.append(lease)
        m.claim_epochs.append(lease.epoch)
        return lease

    @precondition(_some(_open))
    @rule(owner=st.sampled_from(WORKERS), data=st.data())
    def advance(self, owner: str, data: st.DataObject) -> None:
        """An honest worker: claim when it must, then make a few legal moves under its lease."""
        self._advance(owner, data)

    # Hypothesis picks among enabled rules evenly: a second entry point weights honest progress.
    @precondition(_some(_open))
    @rule(owner=st.sampled_from(WORKERS), data=st.data())
    def advance_more(self, owner: str, data: st.DataObject) -> None:
        self._advance(owner, data)

    def _advance(self, owner: str, data: st.DataObject) -> None:
        task_id = self.pick(data, _open)
        m = self.model[task_id]
        for _ in range(data.draw(st.integers(1, 4), label="moves")):
            if m.status in TERMINAL:
                return
            holding = m.leases and m.lease_live and m.holds(m.leases[-1])
            if not holding and self._claim(task_id, owner) is None:
                return
            legal = sorted(TRANSITIONS[m.status])
            onward = [s for s in legal if s not in TERMINAL]
            # Mostly onward, so that thirty steps take tasks deep into the table.
            targets = st.sampled_from(legal)
            if onward:
                targets = st.sampled_from(onward) | st.sampled_from(onward) | targets
            to = data.draw(targets, label="to")
            keep = data.draw(st.booleans(), label="keep")
            wake = data.draw(st.booleans(), label="wake")
            self._commit(task_id, m.leases[-1], to, keep, wake)

    @precondition(_some(_has_lease))
    @rule(keep=st.booleans(), wake=st.booleans(), data=st.data())
    def commit(self, keep: bool, wake: bool, data: st.DataObject) -> None:
        """Mostly the latest lease making a legal move; sometimes any lease, any target."""
        task_id = self.pick(data, _has_lease)
        m = self.model[task_id]
        lease = data.draw(st.sampled_from(m.leases[-1:]) | st.sampled_from(m.leases), label="lease")
        legal = sorted(TRANSITIONS[lease.task.status])
        targets = st.sampled_from(list(Status))
        if legal:
            targets = st.sampled_from(legal) | st.sampled_from(legal) | targets
        self._commit(task_id, lease, data.draw(targets, label="to"), keep, wake)

    @precondition(_some(_superseded))
    @rule(to=st.sampled_from(list(Status)), data=st.data())
    def zombie_commit(self, to: Status, data: st.DataObject) -> None:
        """A worker that lost its lease comes back late with its result. The dangerous zombies
        are those at the current version (no commit since they lost it), drawn first."""
        task_id = self.pick(data, _superseded)
        m = self.model[task_id]
        zombies = [lease for lease in m.leases if (lease.owner, lease.epoch) != (m.owner, m.epoch)]
        fresh = [lease for lease in zombies if lease.version == m.version] or zombies
        lease = data.draw(st.sampled_from(fresh) | st.sampled_from(zombies), label="zombie")
        self._commit(task_id, lease, to, keep=False, wake=False)

    @precondition(_some(_lease_lapsed))
    @rule(to=st.sampled_from(list(Status)), data=st.data())
    def same_owner_reclaims(self, to: Status, data: st.DataObject) -> None:
        """Owner names are host:pid: the process whose thread stalled past its lease claims the
        task again under the same name, and then the stalled thread wakes up and commits. Owner
        and version match; only the epoch tells the two leases apart."""
        task_id = self.pick(data, _lease_lapsed)
        m = self.model[task_id]
        assert m.owner is not None
        stalled = m.leases[-1]
        if self._claim(task_id, m.owner) is not None:
            self._commit(task_id, stalled, to, keep=False, wake=False)

    def _commit(self, task_id: str, lease: Lease, to: Status, keep: bool, wake: bool) -> None:
        m = self.model[task_id]
        patch = self._patch(to, keep, wake)
        refused: type[Exception] | None = None
        if not is_legal(lease.task.status, to):
            refused = IllegalTransition
        elif not m.holds(lease):
            refused = StaleTransition
        if refused is not None:
            event(f"commit refused: {refused.__name__}")
            before = self.store.get(task_id)
            with pytest.raises(refused):
                self.store.transition(Guard.lease(lease), patch, lease_ttl_s=600.0)
            assert self.store.get(task_id) == before  # not a column moved, not an event added
            return
        event(f"commit accepted: {m.status.value} -> {to.value}")
        result = self.store.transition(Guard.lease(lease), patch, lease_ttl_s=600.0)
        frm = m.status
        m.status, m.version, m.transitions = to, m.version + 1, m.transitions + 1
        m.timer = "future" if patch.wake_in_s is not None else "none"
        if patch.keep_lease:
            assert result.lease is not None
            m.lease_live = True
            m.leases.append(result.lease)
        else:
            assert result.lease is None
            m.owner, m.lease_live = None, False
        runnable_now = to in RUNNABLE and not patch.keep_lease and patch.wake_in_s is None
        assert (result.dispatch is not None) == runnable_now
        with self.store.engine.connect() as conn:
            last = conn.execute(
                select(task_events.c.seq, task_events.c.from_status, task_events.c.to_status)
                .where(task_events.c.task_id == task_id)
                .order_by(task_events.c.seq.desc())
                .limit(1)
            ).one()
            conn.rollback()
        assert tuple(last) == (result.task.event_seq, frm.value, to.value)

    @staticmethod
    def _patch(to: Status, keep: bool, wake: bool) -> Patch:
        if to is Status.EXECUTING:
            return intent(ACT)  # keeps the lease: the call is made under it
        keep = keep and to not in TERMINAL and to not in PARKED
        wake_in_s = 3600.0 if wake and to in PARKED else None
        return Patch(to=to, event=f"to_{to.value.lower()}", keep_lease=keep, wake_in_s=wake_in_s)

    @precondition(_some(_has_lease))
    @rule(renew=st.booleans(), data=st.data())
    def renew_or_release(self, renew: bool, data: st.DataObject) -> None:
        """Heartbeat or give back, with any lease ever handed out: only the holder's counts."""
        m = self.model[self.pick(data, _has_lease)]
        lease = data.draw(st.sampled_from(m.leases), label="lease")
        mine = (lease.owner, lease.epoch) == (m.owner, m.epoch)
        if renew and mine:
            self.store.renew(lease, 600.0)
            m.lease_live = True
        elif renew:
            with pytest.raises(StaleTransition):
                self.store.renew(lease, 600.0)
        else:
            assert self.store.release(lease) == mine
            if mine:
                m.owner, m.lease_live = None, False

    @precondition(_some(_lease_live))
    @rule(data=st.data())
    def lease_lapses(self, data: st.DataObject) -> None:
        task_id = self.pick(data, _lease_live)
        m = self.model[task_id]
        expire_lease(self.store, task_id)
        m.lease_live = False

    @precondition(_some(_timer_future))
    @rule(data=st.data())
    def timer_falls_due(self, data: st.DataObject) -> None:
        task_id = self.pick(data, _timer_future)
        m = self.model[task_id]
        make_due(self.store, task_id)
        m.timer = "due"

    @precondition(_some(_lease_lapsed))
    @rule()
    def sweep_leases(self) -> None:
        publisher = RecordingPublisher()
        Sweepers(self.store, publisher, SWEEP_SETTINGS, LostBroker()).lease()
        expected, went_unknown = set(), set()
        for task_id, m in self.model.items():
            if m.owner is None or m.lease_live:
                continue
            expected.add(task_id)
            if m.status is Status.EXECUTING:  # invariant 4: unknown, never failed
                went_unknown.add(task_id)
                m.status, m.version, m.transitions = (
                    Status.EXEC_UNKNOWN,
                    m.version + 1,
                    m.transitions + 1,
                )
                m.timer = "none"
            else:  # its worker died mid-step: a failed attempt, parked or dead-lettered
                self._worker_lost(m)
            m.owner, m.lease_live = None, False
        mine = {d.task_id for d in publisher.published if d.tenant_id == self.tenant}
        assert mine == went_unknown  # the others wait out their backoff, or are finished
        assert expected  # the precondition: some lease had lapsed
        for task_id in went_unknown:
            effect = self.store.effect(task_id, ACT.idempotency_key)
            assert effect is not None and effect.status == "unknown"
            event("sweep: EXECUTING -> EXEC_UNKNOWN")
        event("sweep took some" if expected else "sweep took none")

    @staticmethod
    def _worker_lost(m: Model) -> None:
        m.attempts += 1
        m.version, m.transitions = m.version + 1, m.transitions + 1
        if m.attempts >= SWEEP_SETTINGS.max_attempts:
            fails = m.status not in EFFECT_IN_FLIGHT and is_legal(m.status, Status.FAILED)
            m.status, m.timer = (Status.FAILED if fails else Status.ESCALATED), "none"
            event("sweep: worker lost, dead letter")
            return
        if m.status not in (Status.APPROVAL_WAIT, Status.EXEC_UNKNOWN, Status.RETRY_WAIT):
            m.status = Status.RETRY_WAIT
        m.timer = "future"
        event("sweep: worker lost, a failed attempt")

    @rule(data=st.data())
    def request_cancel(self, data: st.DataObject) -> None:
        task_id = self.pick(data)
        m = self.model[task_id]
        result = self.store.request_cancel(task_id, self.tenant)
        if m.status in TERMINAL:
            assert not result.accepted and result.dispatch is None
            return
        assert result.accepted
        m.cancel = True
        m.other_events += 1
        woke = m.status in PARKED and m.owner is None
        assert (result.dispatch is not None) == woke
        if woke:
            m.timer = "due"

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def database_agrees_with_the_model(self) -> None:
        if not self.model:
            return
        n_events = (
            select(func.count())
            .where(task_events.c.task_id == tasks.c.id)
            .scalar_subquery()
            .label("n_events")
        )
        query = select(tasks, n_events, db_now().label("now")).where(
            tasks.c.tenant_id == self.tenant
        )
        with self.store.engine.connect() as conn:  # one statement per check: they run per step
            rows = {r.id: r for r in conn.execute(query)}
            conn.rollback()
        assert set(rows) == set(self.model)
        for task_id, m in self.model.items():
            row = rows[task_id]
            now = row.now
            got = (row.status, row.version, row.lease_epoch, row.lease_owner)
            assert got == (m.status.value, m.version, m.epoch, m.owner), (task_id, m)
            # Exactly one event per accepted transition, plus `created`, plus the non-transition
            # events this machine caused; `event_seq` names the last one.
            assert row.n_events == 1 + m.transitions + m.other_events == row.event_seq
            assert (row.cancel_requested_at is not None) == m.cancel
            assert row.attempts == m.attempts
            # A lease is an owner and an expiry together; a live one only where the model has one.
            assert (row.lease_expires_at is None) == (row.lease_owner is None)
            if row.lease_expires_at is not None:
                assert (row.lease_expires_at > now) == m.lease_live
            # Never two live leases: every claim minted a new epoch, the database holds the
            # latest, and only the holder of (owner, latest epoch) can renew or commit.
            assert m.claim_epochs == list(range(1, len(m.claim_epochs) + 1))
            assert row.lease_epoch == len(m.claim_epochs)
            holders = {(x.owner, x.epoch) for x in m.leases if x.epoch == row.lease_epoch}
            assert len(holders) <= 1
            # A finished task holds nothing; a timer is in the database exactly as modelled.
            if m.status in TERMINAL:
                assert row.lease_owner is None and row.next_attempt_at is None
            if m.timer == "future":
                assert row.next_attempt_at is not None and row.next_attempt_at > now
            elif m.timer == "due":
                assert row.next_attempt_at is not None and row.next_attempt_at <= now
            else:
                assert row.next_attempt_at is None


def machine_for(store: Store) -> type[StoreMachine]:
    return type(f"StoreMachine_{store.backend.name}", (StoreMachine,), {"store": store})


def test_transition_table_against_the_store(store: Store) -> None:
    """Invariants 1, 2, 4 and 6 under arbitrary interleavings of workers, zombies, sweeps
    and cancellation, checked against a model after every step."""
    run_state_machine_as_test(machine_for(store), settings=PROFILE)
