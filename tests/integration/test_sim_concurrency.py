"""Concurrent refunds: one key or one payment, twenty callers, exactly one refund."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer

N = 20
BODY = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.incident_8472()) as server:
        yield server


def race(sim: SimServer, keys: list[str]) -> list[requests.Response]:
    # The barrier releases every caller at once so the requests really overlap on the server.
    barrier = threading.Barrier(len(keys))

    def one(key: str) -> requests.Response:
        barrier.wait()
        return requests.post(
            sim.base_url + "/refunds", json=BODY, headers={"Idempotency-Key": key}, timeout=10
        )

    with ThreadPoolExecutor(len(keys)) as pool:
        return list(pool.map(one, keys))


def test_twenty_callers_with_one_key_create_one_refund(sim: SimServer) -> None:
    responses = race(sim, ["refund:req-8472:pay_8472_b"] * N)
    assert Counter(r.status_code for r in responses) == {201: 1, 200: N - 1}
    assert len({r.json()["refund_id"] for r in responses}) == 1
    assert len(sim.admin.refunds()) == 1
    assert len(sim.admin.requests("refunds.create")) == N


def test_twenty_callers_with_different_keys_on_one_payment_create_one_refund(
    sim: SimServer,
) -> None:
    responses = race(sim, [f"key-{i}" for i in range(N)])
    assert Counter(r.status_code for r in responses) == {201: 1, 409: N - 1}
    refused = {r.json()["error"]["code"] for r in responses if r.status_code == 409}
    assert refused == {"already_refunded"}
    (refund,) = sim.admin.refunds()
    assert refund["payment_id"] == "pay_8472_b" and refund["amount_minor"] == 200_000
