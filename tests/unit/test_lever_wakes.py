"""Which parked tasks a write lever turned off wakes (`ops.switches.wakes_on_clear`): the ones
it parked, unless another lever in force still holds their write."""

from __future__ import annotations

import pytest

from agent_jobs.ops.switches import (
    NO_SWITCHES,
    WRITE_LEVERS,
    Kind,
    SwitchKey,
    held_code,
    wakes_on_clear,
)
from tests.contract.test_ops_switches import switched

STOPPED = "effects_stopped: effects stopped by operator"


@pytest.mark.parametrize(
    ("detail", "code"),
    [
        (STOPPED, "effects_stopped"),
        ("effects_stopped", "effects_stopped"),  # an agent's park names the code alone
        ("tool_disabled: refunds.create is disabled by operator", "tool_disabled"),
        ("read_only: tenant downgraded to read-only tools by operator", "read_only"),
        ("levers_changed: a lever changed since the policy decided; asked again", "levers_changed"),
        ("429 Too Many Requests", None),
        ("", None),
    ],
)
def test_held_code_reads_the_lever_a_park_names(detail: str, code: str | None) -> None:
    assert held_code(detail) == code


def test_its_own_lever_wakes_it_in_its_scope_only() -> None:
    acme = SwitchKey(Kind.EFFECTS_STOPPED, "acme")
    everyone = SwitchKey(Kind.EFFECTS_STOPPED)
    assert wakes_on_clear(acme, STOPPED, "refunds.create", "acme", NO_SWITCHES)
    assert wakes_on_clear(everyone, STOPPED, "refunds.create", "acme", NO_SWITCHES)
    assert not wakes_on_clear(acme, STOPPED, "refunds.create", "beta", NO_SWITCHES)
    # Another lever's park is not this one's.
    assert not wakes_on_clear(SwitchKey(Kind.READ_ONLY, "acme"), STOPPED, "x", "acme", NO_SWITCHES)
    # A pause is no write lever: it releases its own holds (queue.gate).
    assert not wakes_on_clear(SwitchKey(Kind.PAUSED, "acme"), STOPPED, "x", "acme", NO_SWITCHES)


def test_a_tool_lever_wakes_the_tasks_of_that_tool() -> None:
    detail = "tool_disabled: refunds.create is disabled by operator"
    key = SwitchKey(Kind.TOOL_DISABLED, "acme", "refunds.create")
    assert wakes_on_clear(key, detail, "refunds.create", "acme", NO_SWITCHES)
    other = SwitchKey(Kind.TOOL_DISABLED, "acme", "orders.cancel")
    assert not wakes_on_clear(other, detail, "refunds.create", "acme", NO_SWITCHES)


def test_not_while_another_lever_still_holds_the_write() -> None:
    still = switched(effects_stopped=((), True)).current()  # every tenant's, still on
    acme = SwitchKey(Kind.EFFECTS_STOPPED, "acme")
    assert not wakes_on_clear(acme, STOPPED, "refunds.create", "acme", still)


def test_a_park_waiting_for_any_lever_change_or_naming_none_wakes() -> None:
    changed = "levers_changed: a lever changed since the policy decided; asked again"
    for kind in WRITE_LEVERS:
        key = SwitchKey(kind, "acme", "t" if kind is Kind.TOOL_DISABLED else "")
        assert wakes_on_clear(key, changed, "t", "acme", NO_SWITCHES)
        # Unknown words: waking asks the levers and the policy again (one ask, never a send).
        assert wakes_on_clear(key, "throttled by the ledger", "t", "acme", NO_SWITCHES)
