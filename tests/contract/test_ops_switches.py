"""Operator switches: durable with an append-only history (both backends), obeyed by the tool
executor (writes wait, reads go on, revoked credentials are never sent) and by the dispatch gate
(a pause holds tasks without a message and releases them, oldest first, when it is turned off)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agent_jobs.core.clock import FixedClock
from agent_jobs.core.errors import InvalidInput
from agent_jobs.ops.live import StoreSwitches, to_set
from agent_jobs.ops.service import OpsService
from agent_jobs.ops.switches import POLL_INTERVAL_S, Kind, StaticSwitches, SwitchSet
from agent_jobs.orchestrator.ports import NullObserver
from agent_jobs.queue.gate import PAUSE_HOLD, GatedDispatcher
from agent_jobs.store import Dispatch, Store
from agent_jobs.store.schema import ops_switch_history, ops_switches
from agent_jobs.tools import Ok, Rejected, Throttled, ToolExecutor, ToolRegistry
from agent_jobs.tools.credentials import Credential
from agent_jobs.tools.testing import FakeCredentialProvider, InMemoryAuditSink, ScriptedAdapter
from tests.contract.support import count, new_task
from tests.unit.test_tools_executor import CTX, READ_CTX, read_tool, refund_call, write_tool


def service(store: Store, sent: list[Dispatch] | None = None) -> OpsService:
    return OpsService(store, (sent if sent is not None else []).append)


# -- durable, audited ------------------------------------------------------------------------


def test_a_switch_is_stored_with_who_why_and_when_and_every_change_is_history(
    store: Store,
) -> None:
    ops = service(store)
    ops.set("effects_stopped", tenant_id="acme", actor="alice", reason="INC-7 duplicate refunds")
    ops.set("autonomy_threshold", value=0, actor="bob", reason="INC-7: every refund to a person")
    rows = {(r.kind, r.tenant_id): r for r in store.switches()}
    assert rows[("effects_stopped", "acme")].actor == "alice"
    assert rows[("effects_stopped", "acme")].reason == "INC-7 duplicate refunds"
    assert rows[("autonomy_threshold", "")].value == 0
    ops.set("autonomy_threshold", value=50_000, actor="bob", reason="INC-7 easing")
    assert ops.clear("effects_stopped", tenant_id="acme", actor="carol", reason="fixed")
    assert not ops.clear("effects_stopped", tenant_id="acme", actor="carol", reason="again")
    history = ops.history()
    assert [(h.kind, h.value, h.actor) for h in history] == [
        ("effects_stopped", None, "carol"),
        ("autonomy_threshold", 50_000, "bob"),
        ("autonomy_threshold", 0, "bob"),
        ("effects_stopped", True, "alice"),
    ]
    assert all(h.at.tzinfo is not None for h in history)
    assert count(store, ops_switch_history) == 4
    current = to_set(store.switches())
    assert current.effects_stopped("acme") is None
    assert current.autonomy_threshold("acme") == 50_000


def test_bad_switches_are_refused_before_anything_is_written(store: Store) -> None:
    ops = service(store)
    with pytest.raises(InvalidInput):
        ops.set("self_destruct", actor="a", reason="r")
    with pytest.raises(InvalidInput):
        ops.set("tool_disabled", actor="a", reason="r")  # which tool?
    with pytest.raises(InvalidInput):
        ops.set("autonomy_threshold", value=-1, actor="a", reason="r")
    with pytest.raises(InvalidInput):
        ops.set("paused", tenant_id="acme", actor="a", reason=" ")  # no reason, no change
    assert store.switches() == [] and count(store, ops_switch_history) == 0


def test_revoking_credentials_stamps_the_database_clock(store: Store) -> None:
    before = store.db_now().timestamp()
    service(store).set("credential_epoch", tenant_id="acme", actor="a", reason="key leaked")
    epoch = to_set(store.switches()).credential_epoch("acme")
    assert epoch is not None and before <= epoch <= store.db_now().timestamp()


def test_the_cache_rereads_after_the_poll_interval_and_keeps_its_set_on_errors(
    store: Store,
) -> None:
    now = [0.0]
    cache = StoreSwitches(store, clock=lambda: now[0])
    assert len(cache.current()) == 0
    service(store).set("read_only", tenant_id="acme", actor="a", reason="r")
    assert len(cache.current()) == 0  # still fresh: no read
    now[0] += POLL_INTERVAL_S
    assert cache.current().read_only("acme") is not None

    class Down:
        def switches(self) -> list[Any]:
            raise ConnectionError("database gone")

    cache._source = Down()
    now[0] += POLL_INTERVAL_S
    assert cache.current().read_only("acme") is not None  # not flapped off


# -- the executor ----------------------------------------------------------------------------


def switched(**on: Any) -> StaticSwitches:
    from agent_jobs.ops.switches import Switch, SwitchKey

    at = datetime(2026, 3, 14, tzinfo=UTC)
    return StaticSwitches(
        SwitchSet.of(
            Switch(SwitchKey(Kind(k), *where), value, "oncall", "INC", at)
            for k, (where, value) in on.items()
        )
    )


class Rig:
    def __init__(self, switches: StaticSwitches, creds: Any = None) -> None:
        self.clock = FixedClock()
        self.write = ScriptedAdapter([{"refund_id": "rf_1"}])
        self.read = ScriptedAdapter([{"order_id": "ord_1"}])
        self.registry = ToolRegistry([write_tool(self.write), read_tool(self.read)])
        self.executor = ToolExecutor(
            self.registry,
            creds or FakeCredentialProvider(self.clock),
            InMemoryAuditSink(),
            clock=self.clock,
            sleep=lambda _: None,
            switches=switches,
        )

    def refund(self) -> Any:
        return self.executor.execute(refund_call(), CTX)

    def order(self) -> Any:
        return self.executor.execute(
            refund_call().model_copy(
                update={"tool": "orders.get", "args": {"order_id": "o"}, "policy_decision": None,
                        "idempotency_key": None}
            ),
            READ_CTX,
        )  # fmt: skip


def test_stopped_effects_make_a_write_wait_while_reads_go_on() -> None:
    rig = Rig(switched(effects_stopped=(("ten_41",), True)))
    out = rig.refund()
    assert isinstance(out, Throttled)
    assert out.retry_after_s == POLL_INTERVAL_S and out.code == "effects_stopped"
    assert out.message == "effects stopped by operator"
    assert rig.write.calls == 0  # nothing sent
    assert isinstance(rig.order(), Ok)


def test_stopping_effects_for_another_tenant_changes_nothing_here() -> None:
    rig = Rig(switched(effects_stopped=(("other",), True)))
    assert isinstance(rig.refund(), Ok)


def test_a_read_only_tenant_waits_on_writes_and_reads_on() -> None:
    rig = Rig(switched(read_only=(("ten_41",), True)))
    out = rig.refund()
    assert isinstance(out, Throttled) and out.code == "read_only" and rig.write.calls == 0
    assert isinstance(rig.order(), Ok)


def test_a_disabled_tool_is_refused_a_read_and_makes_a_write_wait() -> None:
    rig = Rig(switched(tool_disabled=(("", "orders.get"), True)))
    out = rig.order()
    assert isinstance(out, Rejected) and out.code == "tool_disabled" and not out.transient
    assert rig.read.calls == 0
    assert isinstance(rig.refund(), Ok)
    rig = Rig(switched(tool_disabled=(("ten_41", "refunds.create"), True)))
    out = rig.refund()
    assert isinstance(out, Throttled) and out.code == "tool_disabled" and rig.write.calls == 0


def test_a_credential_minted_before_the_epoch_is_never_sent() -> None:
    clock = FixedClock()
    epoch = clock.now().timestamp() + 60

    class Cached:
        """A provider that hands out a credential it minted earlier (a vault lease)."""

        def mint(self, tool: str, tenant_id: str, ttl_s: int, *, role: str = "") -> Credential:
            return Credential(token="old", expires_at=clock.now(), scope="s", issued_at=clock.now())

    rig = Rig(switched(credential_epoch=(("ten_41",), epoch)), creds=Cached())
    out = rig.refund()
    assert isinstance(out, Throttled) and out.code == "credential_revoked"
    assert rig.write.calls == 0
    read = rig.order()
    assert isinstance(read, Rejected) and read.code == "credential_revoked" and read.transient
    rig = Rig(switched(credential_epoch=(("ten_41",), epoch - 120)), creds=Cached())
    assert isinstance(rig.refund(), Ok)  # minted after the epoch


# -- the dispatch gate: pause and resume ----------------------------------------------------


def test_a_pause_holds_new_steps_and_resume_releases_them_oldest_first(store: Store) -> None:
    switches = StaticSwitches()
    sent: list[Dispatch] = []
    gated = GatedDispatcher(sent.append, store, None, None, NullObserver(), switches=switches)
    ops = service(store, sent)
    ops.set("paused", tenant_id="acme", actor="alice", reason="INC-9 drain")
    switches.set(to_set(store.switches()))
    tasks = [new_task(store, "acme") for _ in range(3)]
    other = new_task(store, "globex")
    for t in [*tasks, other]:
        gated.publish(Dispatch(t.id, t.tenant_id))
    assert [d.task_id for d in sent] == [other.id]  # another tenant runs on
    for t in tasks:
        row = store.get(t.id)
        assert row.held_for == PAUSE_HOLD and row.status.value == "RECEIVED"  # waits, no failure
    assert gated.release_paused() == 0  # still paused: nothing moves
    sent.clear()
    ops.clear("paused", tenant_id="acme", actor="alice", reason="INC-9 resolved")
    switches.set(to_set(store.switches()))
    assert [d.task_id for d in sent] == [t.id for t in tasks]  # in the order they were held
    assert all(store.get(t.id).held_for is None for t in tasks)
    assert gated.sweep() == 0  # released once


def test_a_workflow_pause_holds_only_that_workflow(store: Store) -> None:
    switches = StaticSwitches()
    sent: list[Dispatch] = []
    gated = GatedDispatcher(sent.append, store, None, None, NullObserver(), switches=switches)
    service(store).set("paused", target="example", actor="a", reason="bad prompt")
    switches.set(to_set(store.switches()))
    t = new_task(store, "acme")
    gated.publish(Dispatch(t.id, t.tenant_id))
    assert sent == [] and store.get(t.id).held_for == PAUSE_HOLD
    service(store).set("paused", target="example", actor="a", reason="x")  # value unchanged
    store.set_switch("paused", "", "example", True, actor="a", reason="y")
    with store.tx() as conn:  # turned off behind the gate's back (no release by the changer)
        conn.execute(ops_switches.delete())
    switches.set(to_set(store.switches()))
    assert gated.sweep() == 1 and [d.task_id for d in sent] == [t.id]  # the sweeper's backstop


def test_a_pause_for_everyone_holds_every_tenant(store: Store) -> None:
    switches = StaticSwitches()
    sent: list[Dispatch] = []
    gated = GatedDispatcher(sent.append, store, None, None, NullObserver(), switches=switches)
    service(store).set("paused", actor="a", reason="stop the world")
    switches.set(to_set(store.switches()))
    for tenant in ("a1", "b2"):
        t = new_task(store, tenant)
        gated.publish(Dispatch(t.id, t.tenant_id))
    assert sent == []
    assert sorted(store.held_ages(PAUSE_HOLD)) == ["a1", "b2"]


def test_the_autonomy_threshold_at_zero_sends_every_refund_to_a_person() -> None:
    from agent_jobs.ops.live import install
    from agent_jobs.policy.decisions import ProposedCall
    from agent_jobs.policy.refund import RefundPolicyV4
    from tests.unit.test_tools_executor import ARGS

    small = ProposedCall(
        tool="refunds.create", tool_version="2", args={**ARGS, "amount_minor": 500}
    )

    class Facts:
        """Ledger facts under which the small refund is allowed by the bundle alone."""

        order = None

        def payment(self, _: str) -> Any:
            class Pay:
                was_captured, order_id, currency = True, "o", "INR"

            return Pay()

        def duplicate_capture_confirmed(self, _: str) -> bool:
            return True

        def refunded_minor(self, _: str) -> int:
            return 0

        def refundable_minor(self, _: str) -> int:
            return 10_000

    from agent_jobs.ops import autonomy_threshold_minor

    policy = RefundPolicyV4()
    previous = install(StaticSwitches())
    try:
        # The workflow reads the switch and hands it to the (pure) policy.
        off = autonomy_threshold_minor("acme")
        assert off is None
        assert policy.evaluate(small, Facts(), autonomy_minor=off).kind == "allow"  # type: ignore[arg-type]
        install(switched(autonomy_threshold=(("",), 0)))
        on = autonomy_threshold_minor("acme")
        assert on == 0
        decision = policy.evaluate(small, Facts(), autonomy_minor=on)  # type: ignore[arg-type]
        assert decision.kind == "needs_approval" and "autonomy" in str(decision.reason)
    finally:
        install(previous)
