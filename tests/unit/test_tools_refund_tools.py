"""The refund agent's tool set matches the registry entry of the seed."""

from __future__ import annotations

from agent_jobs.tools import HttpAdapter, SystemsConfig
from agent_jobs.tools.refund_tools import (
    DEFAULT_SYSTEMS,
    PAYMENTS_URL,
    REFUNDS_CREATE_SCHEMA,
    refund_registry,
)


def test_refunds_create_v2_is_keyed_reconcilable_execute_only() -> None:
    reg = refund_registry()
    d = reg.get("refunds.create")
    assert d is not None
    assert (d.version, d.side_effect, d.timeout_s) == ("2", "keyed", 5.0)
    assert d.idempotency_key_template == "refund:{request_id}:{payment_id}"
    assert d.reconcile_tool == "refunds.get_by_key"
    assert d.permission == "support-agent-runtime"
    assert d.step_scopes == frozenset({"execute"})
    assert d.retry.max_attempts == 1
    assert isinstance(d.adapter, HttpAdapter) and d.adapter.method == "POST"
    rec = reg.get("refunds.get_by_key")
    assert rec is not None and not rec.is_write


def test_refund_schema_has_no_way_to_name_a_destination() -> None:
    assert set(REFUNDS_CREATE_SCHEMA["properties"]) == {"payment_id", "amount_minor", "currency"}
    d = refund_registry().get("refunds.create")
    assert d is not None
    ok = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
    assert d.validate_args(ok) == []
    for extra in ("destination_account", "account", "iban", "upi", "to"):
        assert d.validate_args({**ok, extra: "123456789012"})
    assert d.validate_args({**ok, "payment_id": "../admin"})
    assert d.validate_args({**ok, "currency": "inr"})
    assert d.validate_args({**ok, "amount_minor": 0})


def test_read_steps_cannot_see_the_write() -> None:
    reg = refund_registry()
    names = [d.name for d in reg.available("ten_41", "investigate")]
    assert "refunds.create" not in names
    assert {"orders.get", "payments.list", "refunds.list", "policy.search", "policy.get"} <= set(
        names
    )
    assert [d.name for d in reg.available("ten_41", "execute")] == ["refunds.create"]
    assert [d.name for d in reg.available("ten_41", "reconcile")] == ["refunds.get_by_key"]


def test_base_urls_are_settings_not_literals() -> None:
    cfg = SystemsConfig(
        defaults=dict(DEFAULT_SYSTEMS.defaults), environ={PAYMENTS_URL: "http://pay:1"}
    )
    d = refund_registry(cfg).get("refunds.create")
    assert d is not None and isinstance(d.adapter, HttpAdapter)
    assert d.adapter.base_url_setting == PAYMENTS_URL
    assert cfg.base_url(PAYMENTS_URL) == "http://pay:1"
