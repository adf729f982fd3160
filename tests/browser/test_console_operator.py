"""The operator's controls on the Queues page, in the browser, on the real API over Postgres:
turn an incident switch on with a reason (listed, and in the audit trail), turn it off, and
replay a dead letter (it leaves the dead letters). Every action asks for a reason and an explicit
confirmation on the page (no browser dialog). A token without the `operator` role sees none of
it; an operator of another tenant sees nothing of this tenant's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_jobs.core.states import Status
from tests.contract.test_dead_letter_replay import dead_lettered
from tests.integration.api_env import api_settings, harness_app, registry, serve, token

pytestmark = [pytest.mark.postgres]

TENANT = "acme"
OPERATOR = ("operator",)


@pytest.fixture
def console(pg_store: Any, tmp_path: Any) -> Iterator[tuple[str, Any, str]]:
    """The API over Postgres with one dead letter of TENANT's; steps run inline (none here)."""
    cfg = api_settings()
    dead = dead_lettered(pg_store, TENANT)
    reg, _ = registry(tmp_path / "ledger.db")
    _, app = harness_app(pg_store, reg, cfg)
    with serve(app) as base:
        yield base, cfg, dead


def test_an_operator_switches_a_lever_and_replays_a_dead_letter(
    console: tuple[str, Any, str], pg_store: Any, tab_factory: Any
) -> None:
    base, cfg, dead = console
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, "oncall-7", roles=OPERATOR), "#queues")
    page.wait_for_selector("#ops:not([hidden]) #no-switches")

    # Turn one on: the form, then an explicit confirmation naming what will happen.
    page.select_option("#switch-kind", "tool_disabled")
    page.fill("#switch-target", "refunds.create")
    page.click("#switch-on")
    assert "reason is required" in (page.text_content("#switch-outcome") or "")
    assert not page.is_visible("#switch-confirm")
    page.fill("#switch-reason", "INC-31 refunds misfiring")
    page.click("#switch-on")
    assert "tool_disabled" in (page.text_content("#switch-confirm-text") or "")
    page.click("#switch-confirm-yes")
    row = page.locator("#switch-table tr[data-kind='tool_disabled']")
    row.wait_for()
    text = row.text_content() or ""
    assert "refunds.create" in text and "oncall-7" in text and "INC-31 refunds misfiring" in text
    page.wait_for_selector("#history-table td:has-text('INC-31 refunds misfiring')")
    assert "Turned on tool_disabled" in (page.text_content("#switch-outcome") or "")
    tab.shoot("queues-operator")

    # Turn it off: a reason, then confirm; gone from the list, both changes in the audit trail.
    row.get_by_role("button", name="Turn off", exact=True).click()
    row.locator("input[aria-label=reason]").fill("INC-31 fixed")
    row.get_by_role("button", name="Confirm turn off").click()
    page.wait_for_selector("#no-switches")
    page.wait_for_selector("#history-table td:has-text('INC-31 fixed')")
    history = page.locator("#history-table tbody tr")
    assert history.count() == 2
    assert "turned off" in (history.nth(0).text_content() or "")  # newest first
    assert "oncall-7" in (history.nth(0).text_content() or "")

    # Replay the dead letter: reason and confirmation, then it leaves the dead letters.
    dl = page.locator(f"#dead-letters tr[data-task-id='{dead}']")
    dl.get_by_role("button", name="Replay", exact=True).click()
    dl.locator("input[aria-label=reason]").fill("provider fixed")
    dl.get_by_role("button", name="Confirm replay").click()
    page.wait_for_selector(f"#dead-letters tr[data-task-id='{dead}']", state="detached")
    assert "resumed as RUNNING" in (page.text_content("#replay-outcome") or "")
    assert "No dead letters" in (page.text_content("#queues") or "")
    assert pg_store.get(dead).status is Status.RUNNING
    assert tab.foreign_requests() == []
    assert tab.errors == []  # no CSP violation, no script error


def test_others_see_no_operator_controls_and_nothing_of_another_tenant(
    console: tuple[str, Any, str], tab_factory: Any
) -> None:
    base, cfg, dead = console
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, "svc-viewer"), "#queues")  # no operator role
    # The queue view (depth, in-flight steps, dead-letter reasons) is an operator's: not asked for.
    page.wait_for_selector("#queues-error:has-text('operator role')")
    assert dead not in (page.text_content("#queues") or "")
    assert not page.is_visible("#ops")
    assert page.locator("#dead-letters button").count() == 0
    assert not [u for u in tab.requests if "/v1/ops/" in u or "/v1/console/queues" in u]

    other = tab_factory(base)
    page = other.open(token(cfg, "globex", "oncall-9", roles=OPERATOR), "#queues")
    page.wait_for_selector("#ops:not([hidden]) #no-switches")
    page.wait_for_selector("#no-dead-letters:has-text('No dead letters')")
    assert dead not in (page.text_content("#queues") or "")
    assert tab.errors == [] and other.errors == []
