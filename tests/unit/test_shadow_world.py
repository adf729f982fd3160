"""Shadow rebuilds a copy's world from what the live task read; those reads came from outside
(business systems, a model's choices of what to read), so any shape is either rebuilt into a
world the simulator accepts or skipped, never an exception that stops the whole shadow run."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.releases.shadow import world_from_task
from agent_jobs.sim import worlds
from agent_jobs.sim.models import WorldData

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
entries = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["tool", "model", "gate"]) | st.text(max_size=5),
        "ok": st.booleans(),
        "tool": st.sampled_from(["orders.get", "payments.list", "refunds.list"])
        | st.text(max_size=8),
        "result": json_values,
    }
)


@settings(max_examples=300, deadline=None)
@given(st.lists(entries, max_size=6))
def test_any_reads_give_a_loadable_world_or_none(history: list[dict[str, Any]]) -> None:
    world = world_from_task({"history": history})
    if world is not None:
        WorldData.model_validate(world)


def _reads(world: dict[str, Any], refunded: int) -> dict[str, Any]:
    order = {**world["orders"][0], "payment_ids": [p["payment_id"] for p in world["payments"]]}
    payments = [
        {**p, "refunded_minor": refunded if i else 0} for i, p in enumerate(world["payments"])
    ]
    return {
        "history": [
            {"kind": "tool", "ok": True, "tool": "orders.get", "result": order},
            {"kind": "tool", "ok": True, "tool": "payments.list", "result": {"payments": payments}},
        ]
    }


def test_a_refund_seen_only_as_a_refunded_total_is_kept() -> None:
    """The live task read the payment's refunded total, not the refund: the copy's world keeps
    a standing refund of that amount (before, it was dropped and the copy refunded again)."""
    live = worlds.already_refunded()
    world = world_from_task(_reads(live, 200_000))
    assert world is not None
    assert [(r["payment_id"], r["amount_minor"]) for r in world["refunds"]] == [
        ("pay_9102_b", 200_000)
    ]
    assert world_from_task(_reads(live, 0))["refunds"] == []  # type: ignore[index]
