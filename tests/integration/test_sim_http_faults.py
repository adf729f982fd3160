"""Every fault kind over real HTTP: what the caller sees, and what the ledger holds afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import requests

from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer

KEY = "refund:req-8472:pay_8472_b"
BODY = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.incident_8472()) as server:
        yield server


def post_refund(sim: SimServer, timeout: float | tuple[float, float] = 5) -> requests.Response:
    return requests.post(
        sim.base_url + "/refunds", json=BODY, headers={"Idempotency-Key": KEY}, timeout=timeout
    )


def lookup(sim: SimServer) -> list[dict[str, object]]:
    r = requests.get(sim.base_url + "/refunds", params={"idempotency_key": KEY}, timeout=5)
    assert r.status_code == 200
    refunds: list[dict[str, object]] = r.json()["refunds"]
    return refunds


def test_drop_after_commit_loses_the_answer_not_the_refund(sim: SimServer) -> None:
    sim.admin.arm("refunds.create", "drop_after_commit")
    with pytest.raises(requests.ConnectionError):
        post_refund(sim)
    (found,) = lookup(sim)  # the reconcile read finds what the lost answer would have said
    assert found["payment_id"] == "pay_8472_b" and found["status"] == "processing"
    retry = post_refund(sim)
    assert retry.status_code == 200 and retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == found
    assert len(sim.admin.refunds()) == 1
    calls = sim.wait_for_requests(2, "refunds.create")
    assert [(c["idempotency_key"], c["outcome"], c["fault"]) for c in calls] == [
        (KEY, "dropped", "drop_after_commit"),
        (KEY, "responded", None),
    ]


def test_delay_times_the_caller_out_and_the_refund_still_lands(sim: SimServer) -> None:
    sim.admin.arm("refunds.create", "delay", delay_s=0.5)
    with pytest.raises(requests.ReadTimeout):
        post_refund(sim, timeout=(5, 0.1))  # connected at once; it is the answer that is late
    # Wait on the server's own log (no sleeping) until the delayed request has done its work.
    (call,) = sim.admin.requests("refunds.create", min_count=1, wait_s=10)
    assert call["fault"] == "delay" and call["status"] == 201
    (found,) = lookup(sim)
    assert found["amount_minor"] == 200_000


def test_error_before_commit_changes_nothing(sim: SimServer) -> None:
    sim.admin.arm("refunds.create", "error_before_commit")
    r = post_refund(sim)
    assert r.status_code == 503 and r.json()["error"]["code"] == "injected_fault"
    assert lookup(sim) == []
    assert post_refund(sim).status_code == 201  # the fault was used up by one request


def test_error_after_commit_reports_failure_of_a_committed_refund(sim: SimServer) -> None:
    sim.admin.arm("refunds.create", "error_after_commit")
    r = post_refund(sim)
    assert r.status_code == 500 and r.json()["error"]["code"] == "injected_fault"
    assert len(lookup(sim)) == 1
    assert post_refund(sim).status_code == 200  # a retry with the key replays, never doubles
    assert len(sim.admin.refunds()) == 1


def test_times_counts_requests_and_other_operations_are_untouched(sim: SimServer) -> None:
    sim.admin.arm("orders.get", "error_before_commit", times=2)
    url = sim.base_url + "/orders/8472"
    assert requests.get(sim.base_url + "/payments?order_id=8472", timeout=5).status_code == 200
    assert [sim.admin.faults()[0]["remaining"]] == [2]
    assert [requests.get(url, timeout=5).status_code for _ in range(3)] == [503, 503, 200]
    assert sim.admin.faults() == []


Call = Callable[[SimServer], requests.Response]

READS: dict[str, Call] = {
    "orders.get": lambda s: requests.get(s.base_url + "/orders/8472", timeout=5),
    "payments.list": lambda s: requests.get(s.base_url + "/payments?order_id=8472", timeout=5),
    "refunds.get_by_key": lambda s: requests.get(
        s.base_url + "/refunds", params={"idempotency_key": KEY}, timeout=5
    ),
    "refunds.list": lambda s: requests.get(
        s.base_url + "/refunds", params={"payment_id": "pay_8472_b"}, timeout=5
    ),
    "refunds.get": lambda s: requests.get(s.base_url + "/refunds/rf_1", timeout=5),
    "policies.get": lambda s: requests.get(s.base_url + "/policies/POL-REF-004", timeout=5),
    "policies.search": lambda s: requests.get(
        s.base_url + "/policies/search", params={"q": "refund"}, timeout=5
    ),
}


@pytest.mark.parametrize("operation", sorted(READS))
def test_every_read_operation_takes_every_fault(sim: SimServer, operation: str) -> None:
    call = READS[operation]
    baseline = call(sim)
    sim.admin.arm(operation, "error_before_commit")
    sim.admin.arm(operation, "error_after_commit")
    sim.admin.arm(operation, "drop_after_commit")
    sim.admin.arm(operation, "delay", delay_s=0.01)
    assert call(sim).status_code == 503
    assert call(sim).status_code == 500
    with pytest.raises(requests.ConnectionError):
        call(sim)
    delayed = call(sim)
    assert (delayed.status_code, delayed.json()) == (baseline.status_code, baseline.json())
    # An entry's fault is filled in once its response is written, which can be just after the
    # caller has read it: wait for all five to complete.
    assert [c["fault"] for c in sim.admin.requests(operation, min_count=5)] == [
        None,
        "error_before_commit",
        "error_after_commit",
        "drop_after_commit",
        "delay",
    ]


def test_drop_on_a_kept_alive_connection_is_still_a_connection_error(sim: SimServer) -> None:
    with requests.Session() as session:
        assert session.get(sim.base_url + "/healthz", timeout=5).status_code == 200
        sim.admin.arm("orders.get", "drop_after_commit")
        with pytest.raises(requests.ConnectionError):
            session.get(sim.base_url + "/orders/8472", timeout=5)
        assert session.get(sim.base_url + "/orders/8472", timeout=5).status_code == 200
