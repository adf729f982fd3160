"""The approver's whole flow in the browser, on the real API (uvicorn), a real Celery worker on
Redis and Postgres, and the simulated business systems: a refund parks, the approver sees the
exact action with its evidence, grants, and the task completes. Markup a customer wrote (in the
order's customer name and note) is shown as text and never runs. Then the refusals: a
self-approval, an approval decided elsewhere and an expired one are refused visibly, and the page
updates without a reload.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import update

from agent_jobs.core.states import Status
from agent_jobs.sim import worlds
from agent_jobs.store.schema import approvals
from agent_jobs.store.types import db_now_plus
from tests.browser.scenes import (
    APPROVER,
    INJECTED_ORDER,
    NAME_PAYLOAD,
    NOTE_PAYLOAD,
    REQUESTER,
    injected_world,
    refund_registry,
    request_for,
    sim_server,
    world_with,
)
from tests.integration.api_env import (
    api_settings,
    auth,
    harness_app,
    live_runtime,
    serve,
    token,
    wait_until,
)

TENANT = "acme"


@pytest.fixture
def live(
    pg_database: str, pg_store: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Any]]:
    from agent_jobs.api.app import create_app
    from agent_jobs.queue.embedded import EmbeddedWorker

    with sim_server(world_with(worlds.incident_8472, injected_world)) as sim:
        # The refund workflow's tools read the business systems' address from the environment.
        monkeypatch.setenv("AGENT_JOBS_SYSTEMS_URL", sim.base_url)
        with (
            live_runtime(pg_database, systems_url=sim.base_url) as runtime,
            EmbeddedWorker(concurrency=2, beat_enabled=False),
            serve(create_app(runtime)) as base,
        ):
            yield base, runtime


def _submit(base: str, cfg: Any, order_id: str, sub: str = REQUESTER) -> str:
    body = request_for(order_id).model_dump()
    answer = requests.post(
        f"{base}/v1/tasks",
        json=body,
        headers=auth(token(cfg, TENANT, sub), **{"Idempotency-Key": f"req-{order_id}"}),
        timeout=10,
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["task_id"])


def _task(base: str, cfg: Any, task_id: str) -> dict[str, Any]:
    answer = requests.get(
        f"{base}/v1/tasks/{task_id}", headers=auth(token(cfg, TENANT, "svc")), timeout=10
    )
    return dict(answer.json())


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.slow
def test_approver_sees_the_exact_action_grants_and_the_task_completes(
    live: tuple[str, Any], tab_factory: Any
) -> None:
    base, runtime = live
    cfg = runtime.settings
    task_id = _submit(base, cfg, INJECTED_ORDER)
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, APPROVER, roles=("approver",)))
    # Parked by the real worker; the page shows it by itself (no reload).
    card = page.locator(f"article.approval[data-task-id='{task_id}']")
    card.wait_for(timeout=60_000)
    [approval] = runtime.store.list_approvals(TENANT, status="pending", task_id=task_id)

    # The exact action: tool, arguments, amount with currency, payment, hash, policy, requester.
    assert card.locator(".tool").text_content() == "refunds.create@2"
    assert card.locator(".amount").text_content() == "₹2,000"
    assert card.locator(".payment").text_content() == f"payment pay_{INJECTED_ORDER}_b"
    assert card.locator(".hash").text_content() == approval.action_hash
    assert card.locator(".requester").text_content() == REQUESTER
    text = card.text_content() or ""
    assert "POL-REF-004@4" in text and ">= INR 1,000" in text
    assert '"pay_9104_b"' in text and "200000" in text
    assert "left" in (card.locator(".left").text_content() or "")
    # The evidence: both captures, from the payments system's read, the target highlighted.
    facts = card.locator("table.facts")
    assert facts.locator("tbody td:nth-child(2) code", has_text="pay_9104_a").count() == 1
    target = facts.locator("tr.target")
    assert "captured" in (target.text_content() or "") and "payments.list" in (
        target.text_content() or ""
    )

    # What the customer wrote is shown exactly, as text; none of it ran.
    assert card.locator(".customer-name").text_content() == NAME_PAYLOAD
    assert card.locator(".order-note").text_content() == NOTE_PAYLOAD
    assert card.locator("img, script, b").count() == 0
    assert page.evaluate("() => window.__pwned === undefined")
    tab.shoot("approvals")

    card.locator("footer input").fill("duplicate capture confirmed in the ledger")
    card.locator("button.grant").click()
    card.locator(".outcome.done").wait_for()
    assert f"Granted by {APPROVER}" in (card.locator(".outcome").text_content() or "")
    done = wait_until(
        "the task to complete",
        lambda: (t := _task(base, cfg, task_id))["status"] in ("COMPLETED", "ESCALATED") and t,
        timeout_s=60,
    )
    assert done["status"] == "COMPLETED"
    [granted] = [e for e in runtime.store.events(task_id) if e.type == "approval_granted"]
    assert granted.data["approver"] == APPROVER
    assert granted.data["note"] == "duplicate capture confirmed in the ledger"

    page.goto(f"{base}/console#timeline/{task_id}")
    page.wait_for_selector("#task-status:has-text('COMPLETED')")
    assert "processing" in (page.text_content("#reply") or "")
    assert page.evaluate("() => window.__pwned === undefined")

    # The queue page is an operator's (depth, in-flight steps, dead-letter reasons): an approver
    # is told so, and the view is not requested.
    page.goto(f"{base}/console#queues")
    page.wait_for_selector("#queues-error:has-text('operator role')")
    assert page.locator("#queue-table").count() == 0
    assert not [u for u in tab.requests if "/v1/console/queues" in u]
    assert tab.foreign_requests() == []
    assert tab.errors == []


@pytest.fixture
def parked(pg_store: Any) -> Iterator[tuple[str, Any, Any]]:
    """An API over the inline harness: tasks park for approval without a worker."""
    cfg = api_settings()
    with sim_server(world_with(worlds.incident_8472, injected_world)) as sim:
        reg = refund_registry(sim.base_url)
        harness, app = harness_app(pg_store, reg, cfg)
        with serve(app) as base:
            yield base, harness, cfg


def _park(harness: Any, order_id: str, requester: str) -> Any:
    task = harness.submit(TENANT, f"req-{order_id}", request_for(order_id), requester=requester)
    assert harness.settle(task.id).status is Status.APPROVAL_WAIT
    [approval] = harness.store.list_approvals(TENANT, status="pending", task_id=task.id)
    return approval


@pytest.mark.postgres
@pytest.mark.slow
def test_refusals_are_visible_and_the_list_updates_without_a_reload(
    parked: tuple[str, Any, Any], tab_factory: Any, tmp_path: Path
) -> None:
    base, harness, cfg = parked
    # lead-41 requested this one: they may not approve it.
    own = _park(harness, "8472", requester=APPROVER)
    tab = tab_factory(base)
    tab.page.clock.install()  # polling advances only when the test says so
    page = tab.open(token(cfg, TENANT, APPROVER, roles=("approver",)))
    card = page.locator(f"article.approval[data-approval-id='{own.approval_id}']")
    card.wait_for()
    card.locator("button.grant").click()
    card.locator(".outcome.refused").wait_for()
    assert "403 self_approval" in (card.locator(".outcome").text_content() or "")
    assert card.locator("button.grant").is_disabled()
    assert harness.store.approval(own.approval_id).status == "pending"

    # A new approval appears without a reload.
    other = _park(harness, INJECTED_ORDER, requester=REQUESTER)
    page.clock.run_for(3_500)
    card = page.locator(f"article.approval[data-approval-id='{other.approval_id}']")
    card.wait_for()

    # Decided by someone else while on screen: this approver's denial is refused, visibly.
    harness.orchestrator.decide_approval(other.approval_id, "lead-42", grant=True)
    card.locator("button.deny").click()
    card.locator(".outcome.refused").wait_for()
    assert "409" in (card.locator(".outcome").text_content() or "")
    assert harness.store.approval(other.approval_id).status == "granted"
    page.clock.run_for(3_500)  # the next refresh says what became of it
    card.locator(".outcome:has-text('granted by lead-42')").wait_for()
    assert tab.errors == []


@pytest.mark.postgres
@pytest.mark.slow
def test_an_expired_approval_is_refused_visibly(
    parked: tuple[str, Any, Any], tab_factory: Any
) -> None:
    base, harness, cfg = parked
    approval = _park(harness, INJECTED_ORDER, requester=REQUESTER)
    tab = tab_factory(base)
    tab.page.clock.install()
    page = tab.open(token(cfg, TENANT, APPROVER, roles=("approver",)))
    card = page.locator(f"article.approval[data-approval-id='{approval.approval_id}']")
    card.wait_for()
    # Its time runs out while it is on screen (before any sweeper marks it expired).
    with harness.store.tx() as conn:
        conn.execute(
            update(approvals)
            .where(approvals.c.id == approval.approval_id)
            .values(expires_at=db_now_plus(-1.0))
        )
    card.locator("button.grant").click()
    card.locator(".outcome.refused").wait_for()
    assert "expired" in (card.locator(".outcome").text_content() or "")
    assert harness.store.approval(approval.approval_id).status != "granted"
    assert harness.store.get(approval.task_id).status is Status.APPROVAL_WAIT
