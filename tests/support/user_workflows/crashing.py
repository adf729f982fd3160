"""A user's module whose step can kill its worker process: `crash_quick@1` (every step quick,
no lease) and `crash_leased@1` (every step under a lease). With `{"crash": true}` the RUNNING
step's `decide` calls `os._exit(1)`, as the OOM killer would end it: no exception, no cleanup,
no ack. With `{"crash": false}` the task completes."""

from __future__ import annotations

import os
from typing import Any

from agent_jobs.orchestrator import workflow as wf
from agent_jobs.workflows.noop import NoActions


class Crashing(NoActions):
    """Kills the process running its RUNNING step when the input asks for it."""

    version = 1

    def __init__(self, name: str, *, quick: bool) -> None:
        self.name = name
        self._quick = quick

    def pinned(self) -> dict[str, Any]:
        return {}

    def quick(self, inp: wf.StepInput) -> bool:
        return self._quick

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {"crash": inp.input.get("crash") is True}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        if inp.state.get("crash"):
            os._exit(1)
        return wf.ToVerify(inp.state)

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return wf.Complete({"by": self.name})


workflows = [Crashing("crash_quick", quick=True), Crashing("crash_leased", quick=False)]
