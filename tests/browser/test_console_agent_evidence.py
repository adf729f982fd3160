"""Any declared agent's evidence in the browser: an approver opens the approval of a task's
second effect and sees the facts it rests on (each tool result with the call that answered it)
and its plan of effects (the disable applied, the order proposed); a device note holding markup
is shown as text and never runs; the task page shows the same. Strict CSP: no error logged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.api_env import serve, token
from tests.integration.test_console_agent_evidence import HOSTILE, TENANT, parked_for_approval

pytestmark = [pytest.mark.slow]


@pytest.fixture
def served(sqlite_store: Any) -> Iterator[tuple[str, Any, str]]:
    cfg, _, app, task_id = parked_for_approval(sqlite_store)
    with serve(app) as base:
        yield base, cfg, task_id


def test_an_agent_s_facts_and_plan_render_as_text(
    served: tuple[str, Any, str], tab_factory: Any
) -> None:
    base, cfg, task_id = served
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, "it-lead", roles=("approver",)), "#approvals")
    card = page.locator(f"article.approval[data-task-id='{task_id}']")
    card.wait_for()
    facts = card.locator("table.agent-facts tbody tr")
    assert facts.count() == 2
    first = facts.nth(0).text_content() or ""
    assert "devices.get" in first and "read 1" in first and HOSTILE in first
    assert card.locator("table.agent-facts img").count() == 0  # the markup is text
    assert "effect 1, answered" in (facts.nth(1).text_content() or "")
    plan = card.locator("ol.plan li")
    assert [plan.nth(i).locator(".plan-status").text_content() for i in range(2)] == [
        "applied",
        "proposed",
    ]
    assert "waiting for a person's approval" in (plan.nth(1).text_content() or "")
    assert "at most 2" in (card.locator(".agent-evidence h4").text_content() or "")
    tab.shoot("approval-agent-evidence")

    page.goto(f"{base}/console#timeline/{task_id}")
    page.wait_for_selector(f"article.timeline[data-task-id='{task_id}'] #task-evidence")
    shown = page.locator("#task-evidence")
    assert HOSTILE in (shown.text_content() or "") and shown.locator("img").count() == 0
    assert shown.locator("ol.plan li.plan-applied").count() == 1
    assert page.title() != "pwned"
    assert tab.foreign_requests() == [] and tab.errors == []
