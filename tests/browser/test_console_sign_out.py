"""Issue 22, item 2: the console forgets on sign-out. One tab: tenant A's approver decides,
searches, lists and opens a timeline, types into the search box, and signs out while a read of
A's is still on its way; tenant B's approver signs in on the same tab. Nothing of A (no id, key,
name, count, message or typed text; not in hidden parts of the page, its inputs, its address or
the tab's storage) is anywhere, including after A's delayed answer has arrived.

Real Postgres, the real API under uvicorn, Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import pytest

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.sim import worlds
from agent_jobs.testing import Harness
from agent_jobs.workflows.noop import NoopWorkflow
from tests.browser.scenes import (
    INJECTED_ORDER,
    REQUESTER,
    injected_world,
    refund_registry,
    request_for,
    sim_server,
    world_with,
)
from tests.integration.api_env import api_settings, harness_app, serve, token

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TENANT_A, APPROVER_A = "acme", "lead-a-41"
TENANT_B, APPROVER_B = "globex", "lead-b-7"
TYPED = "req-typed-by-a"
NOTE = "note typed by A"

# Everything on the page (hidden parts included), every input's value, the address and the
# tab's storage, as one text.
EVERYTHING = """() => {
  const parts = [document.documentElement.textContent, location.href, document.title];
  for (const node of document.querySelectorAll("*")) {
    for (const attr of node.attributes) parts.push(attr.value);
    if ("value" in node && typeof node.value === "string") parts.push(node.value);
  }
  for (const store of [sessionStorage, localStorage]) {
    for (let i = 0; i < store.length; i++) parts.push(store.key(i), store.getItem(store.key(i)));
  }
  return parts.join("\\n");
}"""


@pytest.fixture
def two_tenants(pg_store: Any) -> Iterator[tuple[str, Any, dict[str, list[str]]]]:
    """A's two refunds waiting for a person; B's own task (no approvals)."""
    cfg = api_settings()
    with sim_server(world_with(worlds.incident_8472, injected_world)) as sim:
        registry = refund_registry(sim.base_url)
        registry.register(NoopWorkflow())
        h = Harness(pg_store, registry, cfg)
        a_tasks = []
        for order in ("8472", INJECTED_ORDER):
            task = h.submit(TENANT_A, f"a-req-{order}", request_for(order), requester=REQUESTER)
            assert h.settle(task.id).status is Status.APPROVAL_WAIT
            a_tasks.append(pg_store.get(task.id))
        b_task = h.submit(TENANT_B, "b-own", TaskRequest(workflow="noop@1", input={"steps": 1}))
        h.settle(b_task.id)
        approvals = [a.approval_id for a in pg_store.list_approvals(TENANT_A, status="pending")]
        markers = {
            "ids": [t.id for t in a_tasks] + [t.trace_id for t in a_tasks] + approvals,
            "words": [
                TENANT_A,
                APPROVER_A,
                "a-req-8472",
                f"a-req-{INJECTED_ORDER}",
                TYPED,
                NOTE,
                "pay_8472_b",
                f"pay_{INJECTED_ORDER}_b",
                "Priya",
            ],
        }
        _, app = harness_app(pg_store, registry, cfg)
        with serve(app) as base:
            yield base, cfg, markers


class Held:
    """The next request to `pattern`, held on its way (unanswered until `release`)."""

    def __init__(self, page: Any, pattern: str) -> None:
        self.page = page
        self.routes: list[Any] = []
        self.settled: list[Any] = []  # requests that finished or failed (aborted)
        # Playwright takes Python functions as listeners, not a list's bound builtin.
        page.on("requestfinished", self._settle)
        page.on("requestfailed", self._settle)
        self.pattern = pattern
        page.route(pattern, self._hold)
        for _ in range(400):
            if self.routes:
                break
            page.wait_for_timeout(50)  # the page refreshes what it shows every few seconds
        assert self.routes, f"no request to {pattern}"

    def _settle(self, request: Any) -> None:
        self.settled.append(request)

    def _hold(self, route: Any) -> None:
        if self.routes:
            route.continue_()  # only the first is held
        else:
            self.routes.append(route)

    def _all_settled(self) -> bool:
        return all(any(r.request is s for s in self.settled) for r in self.routes)

    def release(self) -> None:
        """Let the held requests go on to the server and their answers to the page (unless
        the page gave up on them), and wait until the page has taken each answer in."""
        for route in self.routes:
            with suppress(Exception):  # raised when the page aborted it: nothing will arrive
                route.continue_()
        self.page.unroute(self.pattern, self._hold)
        for _ in range(400):
            if self._all_settled():
                break
            self.page.wait_for_timeout(50)
        assert self._all_settled(), "a held request neither finished nor failed"
        # The answer's promise settles in a task after its body arrived: a few turns of the loop.
        for _ in range(3):
            self.page.evaluate("() => new Promise((done) => setTimeout(done, 0))")


def _found(text: str, markers: dict[str, list[str]]) -> list[str]:
    return [m for m in markers["ids"] + markers["words"] if m in text]


def test_after_sign_out_the_next_person_on_the_tab_sees_nothing_of_the_last(
    two_tenants: tuple[str, Any, dict[str, list[str]]], tab_factory: Any
) -> None:
    base, cfg, markers = two_tenants
    first_task = markers["ids"][0]
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT_A, APPROVER_A, roles=("approver",)), "#approvals")

    # A decides one approval (a message), types a note on the other, sees the count.
    page.wait_for_selector("article.approval >> nth=1")
    assert page.text_content("#approvals-count") == "(2)"
    cards = page.locator("article.approval")
    cards.nth(0).locator("input[aria-label=note]").fill(NOTE)
    cards.nth(1).locator("button.grant").click()
    page.wait_for_selector("article.approval p.outcome.done")

    # A lists the tenant's tasks, opens one's timeline, and types into the search box.
    page.click("#nav a[data-page=timeline]")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#results tbody tr >> nth=1")
    page.click(f"#results a[href='#timeline/{first_task}']")
    page.wait_for_selector(f"article.timeline[data-task-id='{first_task}']")
    page.fill("#q", TYPED)
    page.select_option("#status-filter", "APPROVAL_WAIT")
    # Something else this tab keeps for A (as a later page might: a draft, a last search).
    page.evaluate("() => sessionStorage.setItem('agent_jobs.console.draft', 'a-req-8472')")
    before = page.evaluate(EVERYTHING)
    assert set(_found(before, markers)) >= {first_task, TENANT_A, APPROVER_A, TYPED}

    # The timeline's next refresh is held on its way: A signs out before it answers.
    held = Held(page, "**/v1/console/tasks/*/timeline")
    page.click("#sign-out")
    page.wait_for_selector("#login:not([hidden])")

    # B, another tenant's approver, signs in on the same tab.
    page.fill("#token", token(cfg, TENANT_B, APPROVER_B, roles=("approver",)))
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#who:not(:empty)")
    assert TENANT_B in (page.text_content("#who") or "")
    page.wait_for_selector("#no-approvals")

    # A's answer arrives now.
    held.release()

    after = page.evaluate(EVERYTHING)
    assert _found(after, markers) == []
    assert page.text_content("#approvals-count") == "(0)"  # B's count, not A's
    assert page.locator("article.timeline, article.approval, #results tbody tr").count() == 0
    assert page.evaluate("() => Object.keys(sessionStorage)") == ["agent_jobs.console.token"]
    assert page.input_value("#q") == "" and page.input_value("#status-filter") == ""

    # B's own pages show B's work only, and still nothing of A.
    page.click("#nav a[data-page=timeline]")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#results tbody tr")
    assert page.locator("#results tbody tr").count() == 1
    assert _found(page.evaluate(EVERYTHING), markers) == []
    assert tab.errors == []


def test_a_route_change_drops_the_page_it_left_and_its_late_answers(
    two_tenants: tuple[str, Any, dict[str, list[str]]], tab_factory: Any
) -> None:
    base, cfg, markers = two_tenants
    first, second = markers["ids"][0], markers["ids"][1]
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT_A, APPROVER_A, roles=("approver",)), "#approvals")
    page.wait_for_selector("article.approval >> nth=1")

    # Leaving the approvals page takes its cards and count with it.
    page.click("#nav a[data-page=timeline]")
    page.wait_for_selector("#page-timeline:not([hidden])")
    assert page.locator("article.approval").count() == 0
    assert page.text_content("#approvals-count") == ""

    # The first task's timeline is asked for and held; the person moves on to the second.
    page.evaluate(f"() => {{ location.hash = '#timeline/{first}'; }}")
    held = Held(page, f"**/v1/console/tasks/{first}/timeline")
    page.evaluate(f"() => {{ location.hash = '#timeline/{second}'; }}")
    page.wait_for_selector(f"article.timeline[data-task-id='{second}']")
    held.release()
    assert page.locator("article.timeline").count() == 1
    assert page.locator(f"article.timeline[data-task-id='{first}']").count() == 0
    assert tab.errors == []
