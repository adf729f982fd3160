"""A lookup by key over MCP that answers "not found" in any documented way (`{"found": null}`,
an `isError` result with the code `not_found` in its text or its structured content) sends the
credit again under the same key, once; any other `isError` is a failed lookup, never taken for
"not found" (SQLite and Postgres)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.states import Status
from tests.integration.test_agent_mcp_results import billing, run
from tests.support.mcp_billing_server import calls, credits, set_flag

__all__ = ["billing"]  # the module's server fixture, shared


@pytest.mark.parametrize("way", ["structured", "text", "code"])
def test_a_lookup_saying_not_found_sends_again_under_the_same_key_once(
    store: Any, tenant: str, billing: tuple[Path, str], way: str
) -> None:
    state, url = billing
    account = f"acct-{tenant}"
    set_flag(state, "not_found", way)
    set_flag(state, "drop_first_s", "3")  # received, not applied, answered too late
    try:
        done = run(store, url, tenant, account)
    finally:
        set_flag(state, "drop_first_s", "")
    assert done.status is Status.COMPLETED, done.outcome
    key = f"credit:{tenant}:req-1:{account}"
    assert credits(state, key) == 1
    sent = [t for t, a in calls(state) if a.get("key") == key]
    assert sent[0] == "create_credit" and sent[-1] == "create_credit"
    assert sent.count("create_credit") == 2 and "find_credit" in sent
    seen = [e.type for e in store.events(done.id)]
    assert "retry_same_key" in seen and "reconcile_exhausted" not in seen


def test_a_lookup_failing_otherwise_is_not_taken_for_not_found(
    store: Any, tenant: str, billing: tuple[Path, str]
) -> None:
    state, url = billing
    account = f"acct-{tenant}"
    set_flag(state, "not_found", "other")
    set_flag(state, "drop_first_s", "3")
    try:
        done = run(store, url, tenant, account)
    finally:
        set_flag(state, "drop_first_s", "")
        set_flag(state, "not_found", "")
    assert done.status is Status.ESCALATED, done.outcome
    key = f"credit:{tenant}:req-1:{account}"
    assert [t for t, a in calls(state) if a.get("key") == key].count("create_credit") == 1
    assert "reconcile_exhausted" in [e.type for e in store.events(done.id)]
