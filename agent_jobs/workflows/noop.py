"""`noop@1`: N read steps that do nothing (or sleep `sleep_ms`), then complete. For benchmarks."""

from __future__ import annotations

import time
from typing import Any

from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import InvalidInput
from agent_jobs.orchestrator import workflow as wf


class NoActions:
    """The effect hooks of a workflow that never proposes a side effect: subclass it and write
    `pinned`, `start` and `decide` (and `verify` for an outcome of your own). Any action that
    reached it anyway is denied by its policy and rejected by its executor."""

    policy = "NO-ACTIONS@1"

    def authorize(self, inp: wf.StepInput, action: Action) -> wf.Authorization:
        return wf.Authorization("deny", self.policy, "this workflow has no actions")

    def execute(self, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
        return wf.EffectRejected("no_actions")

    def reconcile(self, inp: wf.StepInput, action: Action) -> wf.ReconcileResult:
        return wf.NoEffect()

    def after_effect(
        self, inp: wf.StepInput, action: Action, result: dict[str, Any]
    ) -> wf.AfterEffect:
        return wf.AfterEffect(dict(inp.state))

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return wf.Complete({})


class NoopWorkflow(NoActions):
    name = "noop"
    version = 1
    policy = "NOOP@1"

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        steps = inp.input.get("steps", 1)
        sleep_ms = inp.input.get("sleep_ms", 0)
        if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 100_000:
            raise InvalidInput("steps must be an integer from 0 to 100000")
        if not isinstance(sleep_ms, int | float) or not 0 <= sleep_ms <= 60_000:
            raise InvalidInput("sleep_ms must be a number from 0 to 60000")
        return {"left": steps}

    def quick(self, inp: wf.StepInput) -> bool:
        """Steps that do no I/O run in one transaction, without a lease (see the runner)."""
        return not inp.input.get("sleep_ms")

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        sleep_ms = inp.input.get("sleep_ms", 0)
        if sleep_ms:
            time.sleep(sleep_ms / 1000)
        left = int(inp.state["left"])
        if left <= 0:
            return wf.ToVerify(inp.state)
        return wf.Observe({**inp.state, "left": left - 1}, note="noop")

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return wf.Complete({"steps": inp.input.get("steps", 1)})
