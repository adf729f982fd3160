"""Invariant 4 under a system that never answers: an effect whose outcome stays unknown and that
reconciliation never finds is retried with the same key, with backoff, a bounded number of
times, and then escalated — never a hot loop, never FAILED without a look."""

from __future__ import annotations

from typing import Any

from agent_jobs.core.contracts import Action, TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.testing import TEST_SETTINGS, Harness


class BlackHole:
    """Sends an effect that never comes back, to a system that never has a record of it."""

    name = "blackhole"
    version = 1

    def __init__(self) -> None:
        self.sent = 0
        self.looked = 0

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        action = Action(
            tool="void.send", tool_version="1", args={"n": 1}, idempotency_key=f"void:{inp.task_id}"
        )
        return wf.Act(action, dict(inp.state))

    def authorize(self, inp: wf.StepInput, action: Action) -> wf.Authorization:
        return wf.Authorization("allow", "VOID@1")

    def execute(self, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
        self.sent += 1
        return wf.EffectUnknown("timeout")

    def reconcile(self, inp: wf.StepInput, action: Action) -> wf.ReconcileResult:
        self.looked += 1
        return wf.NoEffect()

    def after_effect(
        self, inp: wf.StepInput, action: Action, result: dict[str, Any]
    ) -> wf.AfterEffect:
        return wf.AfterEffect(dict(inp.state))

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return wf.Complete({})


def test_an_effect_that_never_resolves_is_escalated_after_bounded_backed_off_retries(
    store: Any, tenant: str
) -> None:
    hole = BlackHole()
    registry = WorkflowRegistry()
    registry.register(hole)
    h = Harness(store, registry)
    task = h.submit(tenant, "k", TaskRequest(workflow="blackhole@1"))
    h.run_until_idle()
    after_first = store.get(task.id)
    # The first unknown is reconciled at once, the retry goes out, and the second unknown waits.
    assert after_first.status is Status.EXEC_UNKNOWN
    assert after_first.next_attempt_at is not None, "a repeated unknown must back off"
    final = h.settle(task.id)
    assert final.status is Status.ESCALATED
    assert hole.sent == TEST_SETTINGS.max_reconcile_attempts
    assert hole.looked == hole.sent, "every retry is preceded by a look"
    keys = {e.idempotency_key for e in store.effects(task.id)}
    assert keys == {f"void:{task.id}"}, "one key for every attempt"
