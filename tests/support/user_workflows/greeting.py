"""The workflow the test modules register: one step, no side effect, an outcome to check."""

from __future__ import annotations

from typing import Any

from agent_jobs.core.errors import InvalidInput
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.workflows.noop import NoActions


class Greeting(NoActions):
    """`<name>@<version>`: greets `input["who"]`; completes with `{"greeting": ...}`."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        who = inp.input.get("who", "world")
        if not isinstance(who, str) or not 0 < len(who) <= 100:
            raise InvalidInput("who must be a string of 1 to 100 characters")
        return {"who": who}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        return wf.ToVerify(inp.state)

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return wf.Complete({"greeting": f"hello, {inp.state['who']}", "by": self.name})
