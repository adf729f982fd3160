"""`Agent`: a tool-calling agent declared in one place, run as a workflow of the orchestrator.

    agent = Agent("order_cancel", input=CancelRequest, prompt=PROMPT,
                  policy=Policy("ORDERS@1", thresholds=[approval_above({"EUR": 10000})]))

    @agent.tool("orders.get")
    def get_order(order_id: str) -> dict[str, Any]: ...

    @agent.effect("orders.cancel", key="cancel:{tenant_id}:{order_id}", lookup=find_by_key)
    def cancel(order_id: str, amount_minor: int, currency: str, idempotency_key: str) -> dict: ...

    workflows = [agent]          # AGENT_JOBS_WORKFLOWS=your.module loads it

The agent is a `Workflow`; its hooks are a generic tool-calling step (`steps.py`), so what the
orchestrator gives every workflow applies unchanged: intent committed before the effect, the
effect's outcome reconciled by key when unknown, approvals bound to the action hash, leases,
fencing, tenant fairness. Its steps: `work` (the model sees every tool, reads run, an effect is
proposed alone), again after each effect while fewer than `max_effects` are applied (the agent
decides its next step from its facts: a second effect is an ordinary decision, with its own
intent, policy decision, approval and key), then `reply` (reads only), each with at most
`max_model_calls` calls between two effects; a final draft goes to the verifier, which checks
its claims against the facts of every effect.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agent_jobs.agents import steps
from agent_jobs.agents.claims import Claim
from agent_jobs.agents.declare import (
    DEFAULT_TIMEOUT_S,
    MODEL_STEPS,
    WORK,
    Effect,
    function_effect,
    function_read,
)
from agent_jobs.agents.facts import Facts
from agent_jobs.agents.model import proposal_schema
from agent_jobs.agents.openapi import OpenApiTools
from agent_jobs.agents.policy import Call, Decision, Policy, Rule, needs_approval
from agent_jobs.agents.services import AgentServices, services_from_settings
from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.gateway import DEFAULT_ROUTE_KEY, ModelGateway
from agent_jobs.gateway.providers.scripted import Rules
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.tools import CredentialProvider, ToolDescriptor, ToolRegistry
from agent_jobs.tools.descriptors import NO_RETRY, RetryPolicy
from agent_jobs.tools.mcp import McpToolSource

F = TypeVar("F", bound=Callable[..., Any])
# Effects one task may apply, at most: each is a model step, a policy decision and perhaps a
# person's approval; more belongs in several tasks (the orchestrator lists 20 in an outcome).
MAX_EFFECTS = 10
C = TypeVar("C", bound=type[Claim])


class Agent:
    """A declared agent (see the module docstring). Declare everything at import; the tools of
    MCP sources are listed, and the model gateway built, on the first task."""

    def __init__(
        self,
        name: str,
        *,
        prompt: str,
        version: int = 1,
        input: type[BaseModel] | None = None,
        policy: Policy | None = None,
        model_route: str = DEFAULT_ROUTE_KEY,
        scripted_model: Rules | None = None,
        max_model_calls: int = 6,
        max_redrafts: int = 1,
        max_effects: int = 1,
        approve_plan: bool = False,
    ) -> None:
        if not prompt.strip():
            raise ConfigError(f"agent {name}: the prompt is empty")
        if not 1 <= max_model_calls <= 50 or not 0 <= max_redrafts <= 5:
            raise ConfigError(f"agent {name}: max_model_calls 1-50, max_redrafts 0-5")
        if not 1 <= max_effects <= MAX_EFFECTS:
            raise ConfigError(f"agent {name}: max_effects 1-{MAX_EFFECTS}")
        self.name = name
        self.version = version
        self.prompt = prompt
        self.input_model = input
        # No policy declared: every effect asks a person (fail closed).
        self.policy = policy or Policy(f"{name}@1", rules=[_ask_always])
        self.model_route = model_route
        self.scripted_model = scripted_model
        self.max_model_calls = max_model_calls
        self.max_redrafts = max_redrafts
        # One by default: a policy written for one effect per task (a cap per refund) is not
        # widened to several without its author saying so.
        self.max_effects = max_effects
        # A plan of effects the model proposes is shown to a person whole: when any of its
        # effects needs one, one approval asks for all (each still its own grant, bound to its
        # hash, used once at its turn). Off: each effect that needs a person asks on its turn.
        self.approve_plan = approve_plan
        self.claims: dict[str, type[Claim]] = {}
        self.effects: dict[str, Effect] = {}
        self._descriptors: list[ToolDescriptor] = []
        self._mcp: list[McpToolSource] = []
        self._registry: ToolRegistry | None = None
        self._services: AgentServices | None = None
        self._lock = threading.Lock()
        self._schema: dict[str, Any] | None = None

    # -- declaring ---------------------------------------------------------------------------

    def tool(
        self,
        name: str | None = None,
        *,
        steps: Iterable[str] = MODEL_STEPS,
        version: str = "1",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy = NO_RETRY,
    ) -> Callable[[F], F]:
        """Declare a read: a typed function the model may call in `steps`."""

        def add(fn: F) -> F:
            self._add(function_read(fn, name or fn.__name__, steps=steps, version=version,
                                    timeout_s=timeout_s, retry=retry))  # fmt: skip
            return fn

        return add

    def effect(
        self,
        name: str | None = None,
        *,
        key: str,
        lookup: Callable[[str], Any],
        version: str = "1",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> Callable[[F], F]:
        """Declare an effect: a typed function that changes a system of record, keyed by the
        template `key` (over its arguments and `tenant_id`, `task_id`, `request_id`), with
        `lookup(idempotency_key) -> result | None` that finds what it did under a key."""

        def add(fn: F) -> F:
            made = function_effect(fn, name or fn.__name__, key=key, lookup=lookup,
                                   version=version, timeout_s=timeout_s)  # fmt: skip
            self._add(made[0], made[1])
            self.effects[made[0].name] = made[2]
            return fn

        return add

    def openapi(self, tools: OpenApiTools) -> None:
        """Add the operations of an OpenAPI document (`agents.openapi.openapi_tools`)."""
        self._add(*tools.descriptors)
        self.effects.update({e.tool: e for e in tools.effects})

    def mcp(self, source: McpToolSource) -> None:
        """Add an MCP server's declared tools (listed on first use). An effect's lookup is
        called with the key in the effect's `key_arg`."""
        for t in source.config.tools:
            if t.kind == "effect":
                assert t.lookup is not None and t.key_arg is not None  # McpToolConfig checks
                name = source.config.qualified(t.tool)
                self.effects[name] = Effect(name, t.lookup, t.key_arg)
        self._mcp.append(source)

    def claim(self, cls: C) -> C:
        """Declare a claim the reply may make (a `Claim` subclass with `holds(facts)`)."""
        kind = cls.claim_type()
        if kind in self.claims:
            raise ConfigError(f"agent {self.name}: claim type {kind} declared twice")
        self.claims[kind] = cls
        self._schema = None
        return cls

    def rule(self, fn: Rule) -> Rule:
        """Add a policy rule (`rule(call, facts) -> Decision | None`), after the others."""
        self.policy = replace(self.policy, rules=(*self.policy.rules, fn))
        return fn

    def use(
        self,
        *,
        gateway: ModelGateway,
        credentials: CredentialProvider,
        observer: Observer | None = None,
    ) -> Agent:
        """Run on these services instead of the settings' (tests, embedded demos)."""
        self._services = (
            AgentServices(gateway, credentials)
            if observer is None
            else AgentServices(gateway, credentials, observer)
        )
        return self

    def _add(self, *descriptors: ToolDescriptor) -> None:
        if self._registry is not None:
            raise ConfigError(f"agent {self.name}: tools are declared before its first task")
        known = {d.name for d in self._descriptors}
        for d in descriptors:
            if d.name in known:
                raise ConfigError(f"agent {self.name}: tool {d.name} declared twice")
            known.add(d.name)
            self._descriptors.append(d)

    # -- what it runs on -----------------------------------------------------------------------

    @property
    def services(self) -> AgentServices:
        if self._services is None:
            with self._lock:
                if self._services is None:
                    self._services = services_from_settings(self.model_route, self.scripted_model)
        return self._services

    @property
    def tools(self) -> ToolRegistry:
        if self._registry is None:
            with self._lock:
                if self._registry is None:
                    listed = [d for s in self._mcp for d in s.descriptors()]
                    registry = ToolRegistry([*self._descriptors, *listed])
                    registry.check()
                    self._registry = registry
        return self._registry

    @property
    def output_schema(self) -> dict[str, Any]:
        if self._schema is None:
            self._schema = proposal_schema(list(self.claims.values()))
        return self._schema

    @property
    def prompt_version(self) -> str:
        """The prompt a task is pinned to: a worker with another prompt will not run it."""
        return f"{self.name}@{hashlib.sha256(self.prompt.encode()).hexdigest()[:12]}"

    def offered(self, step: str, tenant_id: str) -> list[ToolDescriptor]:
        """The model's tools in `step`: its reads, and in `work` its effects too."""
        out = [d for d in self.tools.available(tenant_id, step)]
        if step == WORK:
            out += [d for n in sorted(self.effects) if (d := self.tools.get(n)) is not None]
        return out

    # -- the Workflow hooks --------------------------------------------------------------------

    def pinned(self) -> dict[str, Any]:
        # Tools of MCP sources are versioned when listed (first task), not pinned here.
        return {
            "prompt": self.prompt_version,
            "model_route": self.model_route,
            "policy": self.policy.version,
            "tools": {d.name: d.version for d in self._descriptors},
        }

    def check_input(self, input: dict[str, Any]) -> None:
        """Refuse an invalid submission before a task exists (`InputCheck`)."""
        self._validated(input)

    def _validated(self, data: Mapping[str, Any]) -> dict[str, Any]:
        if self.input_model is None:
            return dict(data)
        try:
            return self.input_model.model_validate(dict(data)).model_dump(mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(f"{where}: {first['msg']}"[:300], field=f"input.{where}") from None

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        state = steps.initial_state(self._validated(inp.input), inp.idempotency_key)
        state["max_effects"] = self.max_effects  # shown with its plan of effects (console)
        return state

    def quick(self, inp: wf.StepInput) -> bool:
        """Starting (validate the input) does no I/O: one compare-and-set without a lease."""
        return not inp.state

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        return steps.decide(self, inp)

    def authorize(self, inp: wf.StepInput, action: Action) -> wf.Authorization:
        return steps.authorize(self, inp, action)

    def execute(self, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
        return steps.execute(self, inp, action)

    def reconcile(self, inp: wf.StepInput, action: Action) -> wf.ReconcileResult:
        return steps.reconcile(self, inp, action)

    def after_effect(
        self, inp: wf.StepInput, action: Action, result: dict[str, Any]
    ) -> wf.AfterEffect:
        return steps.after_effect(self, inp, action, result)

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return steps.verify(self, inp)

    def __repr__(self) -> str:
        return f"Agent({self.name}@{self.version})"


def _ask_always(call: Call, facts: Facts) -> Decision:
    return needs_approval("the agent declares no policy")
