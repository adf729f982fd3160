"""The Releases page, in the browser, on the real API over Postgres: a release manager lists the
releases, opens the live one (its eval reports per suite, its audit trail), rolls it back with a
reason (markup in it stays text) and sees the rollback in the audit trail, with their name and
reason, and the release before it live again; a promote the gate refuses is shown as the server's
refusal. An operator reads but has no buttons; a token with neither role is told so and asks
for nothing; signing out forgets the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.releases.rollout import ReleaseService
from tests.integration.api_env import api_settings, harness_app, registry, serve, token
from tests.integration.test_api_releases import WF, gate_report, manifest

pytestmark = [pytest.mark.postgres]

TENANT = "acme"
REASON = 'refunds stuck <img src=x onerror="window.__pwned=1"> INC-12'


@pytest.fixture
def console(pg_store: Any, tmp_path: Path) -> Iterator[tuple[str, Any, ReleaseService]]:
    """rel-a then rel-b promoted (both with a passed full eval); rel-c stored, never evaluated."""
    cfg = api_settings()
    svc = ReleaseService(pg_store, eval_runs=cfg.release_eval_runs)
    for rid in ("rel-a", "rel-b", "rel-c"):
        svc.create(manifest(rid), "ci")
    for rid in ("rel-a", "rel-b"):
        svc.record_eval(gate_report(manifest(rid), runs=svc.eval_runs), "ci")
        svc.promote(rid, "ci", f"ship {rid}")
    reg, _ = registry(tmp_path / "ledger.db")
    _, app = harness_app(pg_store, reg, cfg)
    with serve(app) as base:
        yield base, cfg, svc


def test_a_release_manager_rolls_back_the_live_release_with_a_reason(
    console: tuple[str, Any, ReleaseService], tab_factory: Any
) -> None:
    base, cfg, svc = console
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, "rm-1", roles=("release_manager",)), "#releases")
    page.wait_for_selector("#releases-table tr[data-release-id='rel-c']")
    rows = page.locator("#releases-table tbody tr")
    assert [rows.nth(i).get_attribute("data-release-id") for i in range(3)] == [
        "rel-c",
        "rel-b",
        "rel-a",
    ]
    assert "live" in (page.text_content("#releases-table tr[data-release-id='rel-b']") or "")
    assert "superseded" in (page.text_content("#releases-table tr[data-release-id='rel-a']") or "")
    assert "not run" in (page.text_content("#releases-table tr[data-release-id='rel-c']") or "")

    # Open the live one: eval reports per suite, the audit trail, a rollback button.
    page.click("#releases-table a:text-is('rel-b')")
    page.wait_for_selector("#release-detail article[data-release-id='rel-b']")
    evals = page.text_content("#release-evals") or ""
    assert "golden-refund@2: pass 3/3" in evals and "safety@1: pass" in evals
    assert "this one" in evals
    assert page.locator("#release-audit tr[data-action='promote']").count() == 1
    assert page.get_by_role("button", name="Promote…").count() == 0
    tab.shoot("releases")

    # Roll it back: no reason is refused on the page; then a reason and a confirmation.
    detail = page.locator("#release-detail")
    detail.get_by_role("button", name="Roll back…").click()
    detail.get_by_role("button", name="Confirm rollback").click()
    assert "reason is required" in (detail.text_content() or "")
    detail.locator("input[aria-label=reason]").fill(REASON)
    detail.get_by_role("button", name="Confirm rollback").click()
    page.wait_for_selector("#release-status:text-is('rolled_back')")
    assert "live is rel-a" in (page.text_content("#release-outcome") or "")
    entry = page.locator("#release-audit tr[data-action='rollback']")
    text = entry.text_content() or ""
    assert REASON in text and "acme/rm-1" in text and "rel-b → rel-a" in text
    page.wait_for_selector("#releases-table tr[data-release-id='rel-a'] .r-live")
    assert page.evaluate("window.__pwned") is None  # the reason stayed text
    [row] = [h for h in svc.store.release_history(WF) if h.action == "rollback"]
    assert row.actor == "acme/rm-1" and row.reason == REASON
    assert svc.store.rollout(WF).incumbent == "rel-a"

    # A promote the gate refuses: the server's reason, shown as it is; nothing changes.
    page.click("#releases-table a:text-is('rel-c')")
    page.wait_for_selector("#release-detail article[data-release-id='rel-c']")
    assert "no passing eval" in (page.text_content("#promote-problems") or "")
    detail.get_by_role("button", name="Promote…").click()
    detail.locator("input[aria-label=reason]").fill("try it")
    detail.get_by_role("button", name="Confirm promote").click()
    page.wait_for_selector("#release-detail .refused:has-text('promote_refused')")
    assert "409" in (page.text_content("#release-detail .refused") or "")
    assert svc.store.rollout(WF).incumbent == "rel-a"

    # Signing out forgets the page (and the address naming the release).
    page.click("#sign-out")
    page.wait_for_selector("#login:not([hidden])")
    assert (page.text_content("#page-releases") or "").count("rel-") == 0
    assert "#releases" not in page.url
    assert tab.foreign_requests() == []
    assert tab.errors == []  # no CSP violation, no script error


def test_an_operator_reads_without_buttons_and_others_see_nothing(
    console: tuple[str, Any, ReleaseService], tab_factory: Any
) -> None:
    base, cfg, _ = console
    tab = tab_factory(base)
    page = tab.open(token(cfg, TENANT, "oncall-7", roles=("operator",)), "#releases/rel-b")
    page.wait_for_selector("#release-detail article[data-release-id='rel-b']")
    page.wait_for_selector("#releases-table tr[data-release-id='rel-a']")
    assert page.locator("#release-detail button").count() == 0

    other = tab_factory(base)
    page = other.open(token(cfg, TENANT, "svc-viewer", roles=("approver",)), "#releases/rel-b")
    page.wait_for_selector("#releases-error:has-text('release_manager')")
    assert "rel-" not in (page.text_content("#page-releases") or "")
    assert not [u for u in other.requests if "/v1/releases" in u]
    assert tab.errors == [] and other.errors == []
