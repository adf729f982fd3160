"""The timeline of seed 004's incident, and the queue page, in the browser.

The incident is played on Postgres by two named workers (tests/browser/scenes.py): the approval
wait, the refund whose outcome is unknown, w-07's lease lapsing while it held the task, and w-12
taking over. The page must show each of them, the model calls with tokens and cost, the tool
calls with outcomes, the customer reply and the verifier's verdict; and nothing of another
tenant's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_jobs.sim import worlds
from tests.browser.scenes import Incident, play_incident, sim_server
from tests.integration.api_env import api_settings, harness_app, registry, serve, token

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TENANT = "acme"


@pytest.fixture
def incident(pg_store: Any, tmp_path: Any) -> Iterator[tuple[str, Incident, Any]]:
    cfg = api_settings()
    with sim_server(worlds.incident_8472()) as sim:
        played = play_incident(pg_store, sim, cfg, TENANT)
        reg, _ = registry(tmp_path / "ledger.db")
        _, app = harness_app(pg_store, reg, cfg)
        with serve(app) as base:
            yield base, played, cfg


def test_the_incident_timeline_shows_the_seeds_figure(
    incident: tuple[str, Incident, Any], tab_factory: Any
) -> None:
    base, played, cfg = incident
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, "oncall-7"), "#timeline")
    page.fill("#q", "req-8472")  # found by its idempotency key
    page.click("#search-form button[type=submit]")
    page.wait_for_selector(f"article.timeline[data-task-id='{played.task_id}']")
    assert page.text_content("#task-status") == "COMPLETED"

    wf = page.locator(".waterfall")
    # The long bar: the approval wait, which held no worker.
    wait_row = wf.locator(".wf-row[data-span='approval.wait']")
    assert "worker_held=false" in (wait_row.text_content() or "")
    # The one red span: the refund call whose outcome is unknown, with its key.
    red = wf.locator(".wf-row.error")
    assert red.count() == 1
    red_text = red.text_content() or ""
    assert "execute_tool refunds.create" in red_text and "outcome=unknown" in red_text
    assert "refund:req-8472:pay_8472_b" in red_text
    # The lease gap: w-07 lost its lease; w-12 took over, and the reconcile found the refund.
    gap = wf.locator(".wf-row[data-span='lease gap']")
    assert gap.count() == 1 and "w-07 → w-12" in (gap.text_content() or "")
    assert "reconcile.result=found" in (
        wf.locator(".wf-row[data-span='reconcile']").text_content() or ""
    )
    assert "lease expired" in (page.text_content("ul.changes") or "")

    # Model calls with tokens and cost; tool calls with outcomes.
    model_rows = page.locator("#model-calls tbody tr")
    assert model_rows.count() == 4
    assert "tokens" not in (page.text_content("#model-calls tfoot") or "")
    assert "4 calls" in (page.text_content("#model-calls tfoot") or "")
    tools = page.locator("#tool-calls tbody tr.unknown")
    assert tools.count() == 1 and "refunds.create" in (tools.text_content() or "")
    assert "refunds.get_by_key" in (page.text_content("#tool-calls") or "")

    # The customer's reply and the verifier's verdict.
    assert "processing" in (page.text_content("#reply") or "")
    assert "Verified" in (page.text_content("#verdict") or "")
    tab.shoot("timeline")
    assert tab.foreign_requests() == []  # no CDN, nothing off this origin
    assert tab.errors == []  # no CSP violation, no script error


def test_another_tenant_sees_nothing_of_it(
    incident: tuple[str, Incident, Any], tab_factory: Any
) -> None:
    base, played, cfg = incident
    tab = tab_factory(base)
    page = tab.open(token(cfg, "globex", "oncall-9"), f"#timeline/{played.task_id}")
    page.wait_for_selector("#search-error:not(:empty)")
    assert "No task of your tenant" in (page.text_content("#search-error") or "")
    assert page.locator("article.timeline").count() == 0
    page.fill("#q", "req-8472")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-error:has-text('idempotency key')")
    assert page.locator("article.timeline").count() == 0


def test_the_queue_page(incident: tuple[str, Incident, Any], tab_factory: Any) -> None:
    base, _played, cfg = incident
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, "oncall-7", roles=("operator",)), "#queues")
    page.wait_for_selector("#queue-table")
    assert page.text_content("#queue-table tbody td") == TENANT
    assert page.text_content("#queue-held") == "0"
    assert page.text_content("#queue-in-flight") == "0"
    assert "No dead letters" in (page.text_content("#queues") or "")
    assert tab.errors == []
