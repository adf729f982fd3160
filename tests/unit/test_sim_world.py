"""The sim's World: the payments system's refund rules, idempotency, dumps and the state file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agent_jobs.core.clock import FixedClock
from agent_jobs.sim import statefile, worlds
from agent_jobs.sim.errors import SimError, StateFileError
from agent_jobs.sim.models import RefundRequest, WorldData
from agent_jobs.sim.world import World


def make(world: dict[str, Any], state_file: Path | None = None) -> World:
    return World(WorldData.model_validate(world), clock=FixedClock(), state_file=state_file)


def refund(
    payment_id: str, amount: int = 200_000, currency: str = "INR", **kw: Any
) -> RefundRequest:
    return RefundRequest(payment_id=payment_id, amount_minor=amount, currency=currency, **kw)


def code_of(call: Any) -> tuple[int, str]:
    with pytest.raises(SimError) as e:
        call()
    return e.value.status, e.value.code


@pytest.mark.parametrize("name", sorted(worlds.BUILDERS))
def test_every_builder_is_a_valid_world_that_round_trips(name: str) -> None:
    data = worlds.build(name)
    json.dumps(data)  # plain JSON, as promised
    expected = WorldData.model_validate(data).model_dump(mode="json")
    assert make(data).dump().model_dump(mode="json") == expected


def test_builders_return_fresh_dicts() -> None:
    a = worlds.incident_8472()
    a["orders"][0]["note"] = "changed"
    assert worlds.incident_8472()["orders"][0]["note"] == ""


def test_unknown_world_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="incident_8472"):
        worlds.build("nope")


def test_incident_first_refund_is_rf_3301_and_is_recorded() -> None:
    w = make(worlds.incident_8472())
    body, replayed = w.create_refund("refund:req-8472:pay_8472_b", refund("pay_8472_b"))
    assert not replayed
    assert body["refund_id"] == "rf_3301"
    assert body["status"] == "processing"
    assert body["order_id"] == "8472"
    assert body["created_at"] == "2026-03-14T10:00:00.000Z"
    payments = {p["payment_id"]: p for p in w.list_payments("8472")}
    assert payments["pay_8472_b"]["refunded_minor"] == 200_000
    assert payments["pay_8472_a"]["refunded_minor"] == 0
    assert [r.refund_id for r in w.dump().refunds] == ["rf_3301"]


def test_same_key_same_body_replays_and_creates_nothing() -> None:
    w = make(worlds.incident_8472())
    first, _ = w.create_refund("k", refund("pay_8472_b", reason="duplicate"))
    again, replayed = w.create_refund("k", refund("pay_8472_b", reason="duplicate"))
    assert replayed and again == first
    assert len(w.dump().refunds) == 1


@pytest.mark.parametrize(
    "changed",
    [
        refund("pay_8472_a"),
        refund("pay_8472_b", amount=100_000),
        refund("pay_8472_b", reason="something else"),
    ],
)
def test_same_key_different_body_is_refused(changed: RefundRequest) -> None:
    w = make(worlds.incident_8472())
    w.create_refund("k", refund("pay_8472_b"))
    assert code_of(lambda: w.create_refund("k", changed)) == (422, "idempotency_key_reused")
    assert len(w.dump().refunds) == 1


def test_a_second_refund_of_one_payment_under_another_key_is_refused() -> None:
    w = make(worlds.incident_8472())
    w.create_refund("k1", refund("pay_8472_b"))
    assert code_of(lambda: w.create_refund("k2", refund("pay_8472_b", amount=1))) == (
        409,
        "already_refunded",
    )


def test_refusals() -> None:
    assert code_of(lambda: make(worlds.incident_8472()).create_refund("k", refund("pay_x"))) == (
        404,
        "payment_not_found",
    )
    hold = make(worlds.auth_hold_lookalike())
    assert code_of(lambda: hold.create_refund("k", refund("pay_9101_b"))) == (
        409,
        "payment_not_captured",
    )
    done = make(worlds.already_refunded())
    assert code_of(lambda: done.create_refund("k", refund("pay_9102_b"))) == (
        409,
        "already_refunded",
    )
    above = make(worlds.amount_above_captured())
    assert code_of(lambda: above.create_refund("k", refund("pay_9103_b", 200_000))) == (
        422,
        "exceeds_refundable",
    )
    usd = make(worlds.incident_8472())
    assert code_of(lambda: usd.create_refund("k", refund("pay_8472_b", currency="USD"))) == (
        422,
        "currency_mismatch",
    )


def test_a_refused_request_leaves_its_key_free_for_a_retry() -> None:
    w = make(worlds.amount_above_captured())
    code_of(lambda: w.create_refund("k", refund("pay_9103_b", 200_000)))
    # Same key, different body: not "reused", because nothing was created under it.
    body, replayed = w.create_refund("k", refund("pay_9103_b", 150_000))
    assert not replayed and body["amount_minor"] == 150_000


def test_a_failed_refund_neither_blocks_nor_counts() -> None:
    data = worlds.already_refunded()
    data["refunds"][0]["status"] = "failed"
    w = make(data)
    assert w.list_payments("9102")[1]["refunded_minor"] == 0
    body, _ = w.create_refund("k", refund("pay_9102_b"))
    assert body["refund_id"] == "rf_3301"


def test_refund_ids_skip_ids_a_loaded_world_already_holds() -> None:
    data = worlds.already_refunded()
    data["refunds"][0]["refund_id"] = "rf_3301"
    w = make(data)
    body, _ = w.create_refund("k", refund("pay_9102_a"))
    assert body["refund_id"] == "rf_3302"


def test_orders_payments_and_lookups() -> None:
    w = make(worlds.incident_8472())
    order = w.get_order("8472")
    assert order["payment_ids"] == ["pay_8472_a", "pay_8472_b"]
    assert order["total_minor"] == 200_000 and order["currency"] == "INR"
    assert code_of(lambda: w.get_order("1")) == (404, "order_not_found")
    assert w.list_payments("nope") == []
    w.create_refund("k", refund("pay_8472_b"))
    assert [r["refund_id"] for r in w.find_refunds(idempotency_key="k")] == ["rf_3301"]
    assert w.find_refunds(idempotency_key="other") == []
    assert [r["refund_id"] for r in w.find_refunds(payment_id="pay_8472_b")] == ["rf_3301"]
    assert w.find_refunds(idempotency_key="k", payment_id="pay_8472_a") == []
    assert w.get_refund("rf_3301")["idempotency_key"] == "k"
    assert code_of(lambda: w.get_refund("rf_1")) == (404, "refund_not_found")


def test_policies_latest_by_default_and_by_version() -> None:
    w = make(worlds.incident_8472())
    assert w.get_policy("POL-REF-004")["version"] == 4
    v3 = w.get_policy("POL-REF-004", 3)
    assert "INR 5,000" in " ".join(c["text"] for c in v3["chunks"])
    assert code_of(lambda: w.get_policy("POL-NOPE")) == (404, "policy_not_found")
    assert code_of(lambda: w.get_policy("POL-REF-004", 9)) == (404, "policy_version_not_found")


def test_policy_search_reads_latest_versions_only() -> None:
    w = make(worlds.incident_8472())
    hits = w.search_policies("approval threshold refunds INR", doc_id=None, limit=50)
    assert hits and all(h["version"] == 4 for h in hits if h["doc_id"] == "POL-REF-004")
    assert hits[0]["chunk_id"] == "c0003"
    assert "5,000" not in " ".join(h["text"] for h in hits)
    only = w.search_policies("refund", doc_id="POL-COM-002", limit=50)
    assert only and {h["doc_id"] for h in only} == {"POL-COM-002"}


def test_inconsistent_worlds_are_rejected() -> None:
    data = worlds.incident_8472()
    data["payments"][1]["payment_id"] = "pay_8472_a"
    with pytest.raises(ValidationError, match="duplicate payment_id"):
        WorldData.model_validate(data)
    data = worlds.incident_8472()
    data["payments"][0]["order_id"] = "9999"
    with pytest.raises(ValidationError, match="unknown order"):
        WorldData.model_validate(data)
    data = worlds.already_refunded()
    data["refunds"][0]["payment_id"] = "pay_none"
    with pytest.raises(ValidationError, match="unknown payment"):
        WorldData.model_validate(data)
    data = worlds.incident_8472()
    data["payments"][0]["created_at"] = "yesterday"
    with pytest.raises(ValidationError, match="ISO 8601"):
        WorldData.model_validate(data)


def test_every_mutation_rewrites_the_state_file(tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    w = make(worlds.incident_8472(), state_file=path)
    assert not path.exists()  # construction alone is not a mutation
    w.create_refund("k", refund("pay_8472_b"))
    saved = statefile.read(path)
    assert saved is not None and [r.refund_id for r in saved.refunds] == ["rf_3301"]
    assert saved.next_refund_seq == 3302
    assert World(saved, state_file=path).get_refund("rf_3301")["payment_id"] == "pay_8472_b"
    w.reset()
    emptied = statefile.read(path)
    assert emptied is not None and emptied.refunds == [] and emptied.orders == []
    assert [p.name for p in tmp_path.iterdir()] == ["sim.json"]  # no temp file left behind


def test_a_corrupt_state_file_is_an_error_not_an_empty_world(tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    path.write_text("{not json")
    with pytest.raises(StateFileError, match="not JSON"):
        statefile.read(path)
    path.write_text(json.dumps({"orders": 5}))
    with pytest.raises(StateFileError, match="not a sim world"):
        statefile.read(path)
    assert statefile.read(tmp_path / "missing.json") is None
