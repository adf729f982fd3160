"""An operator's write levers hold every side effect, also one a workflow sends by itself.

`example@1` calls its ledger directly in `execute()`, as a workflow of your own may, not through
the tool executor that checks the switches for the refund agent and declared agents. With the
tenant's effects stopped, the tenant read-only, or the action's tool disabled, its payout must
wait (RETRY_WAIT, read as `stopped_by_operator`, nothing sent) and go once the lever is off.
Both backends. Before the check moved to the orchestrator's EXECUTING step, the payout was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import DisplayStatus, Status
from agent_jobs.ops.live import install
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.testing import Harness
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.example_backend import ExampleBackend
from tests.contract.test_ops_switches import switched


@pytest.fixture
def restore_switches() -> Iterator[None]:
    previous = install(StaticSwitches())
    yield
    install(previous)


@pytest.mark.usefixtures("restore_switches")
@pytest.mark.parametrize(
    "lever",
    [
        {"effects_stopped": (("{tenant}",), True)},
        {"read_only": (("{tenant}",), True)},
        {"tool_disabled": (("{tenant}", "ledger.transfer"), True)},
        {"effects_stopped": (("",), True)},  # every tenant
    ],
    ids=["effects-stopped", "read-only", "tool-disabled", "effects-stopped-everywhere"],
)
def test_a_workflows_own_effect_waits_while_a_write_lever_is_on(
    store: Any, tenant: str, tmp_path: Path, lever: dict[str, Any]
) -> None:
    ledger = ExampleBackend(tmp_path / "ledger.db")
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ledger))
    h = Harness(store, registry)
    on = {
        kind: (tuple(w.format(tenant=tenant) for w in where), value)
        for kind, (where, value) in lever.items()
    }
    install(switched(**on))

    payout = {"account": "acc_42", "amount_minor": 1500, "reads": 0}
    task = h.submit(tenant, "lever-1", TaskRequest(workflow="example@1", input=payout))
    h.run_until_idle()
    for _ in range(3):  # asked again after the poll interval: still held, still nothing sent
        held = store.get(task.id)
        assert held.status is Status.RETRY_WAIT, [e.type for e in store.events(task.id)]
        assert held.view().display_status is DisplayStatus.STOPPED_BY_OPERATOR
        assert ledger.transfers() == []
        h.make_due(task.id)
        h.sweepers.all()
        h.run_until_idle()
    throttled = [e for e in store.events(task.id) if e.type == "effect_throttled"]
    assert len(throttled) == 4 and all(e.data["by_operator"] for e in throttled)  # 1 + 3 asks
    assert "by operator" in throttled[-1].data["reason"]

    install(StaticSwitches())  # the lever is off
    done = h.settle(task.id)
    assert done.status is Status.COMPLETED
    assert [t.idempotency_key for t in ledger.transfers()] == [f"payout:{tenant}:lever-1"]


@pytest.mark.usefixtures("restore_switches")
def test_another_tenants_lever_or_another_tool_holds_nothing_here(
    store: Any, tenant: str, tmp_path: Path
) -> None:
    ledger = ExampleBackend(tmp_path / "ledger.db")
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ledger))
    h = Harness(store, registry)
    install(
        switched(
            effects_stopped=(("other",), True),
            tool_disabled=((tenant, "refunds.create"), True),
        )
    )
    payout = {"account": "acc_42", "amount_minor": 1500, "reads": 0}
    task = h.submit(tenant, "free-1", TaskRequest(workflow="example@1", input=payout))
    assert h.settle(task.id).status is Status.COMPLETED
    assert len(ledger.transfers()) == 1
