"""`Declaration`: what an agent is, as data, for an agent that runs its own workflow hooks.

`Agent` runs the generic tool-calling step (`work`, then `reply`). An agent with a fixed sequence
of decision points of its own (the refund agent: investigate, retrieve policy, decide, draft)
keeps its hooks but declares the rest on this surface, in one place:

    REFUND = Declaration(
        name="refund_resolution", version=3, prompt=SYSTEM, prompt_version="refund-v7",
        model_route="support-tier2@2026-03",
        tools={"orders.get": "1", ..., "refunds.create": "2"},
        order=("investigate", "policy", "decide", "confirm", "draft", "verify"),
        phases=(Phase("investigate", ("orders.get", "payments.list"), "Step: investigate ..."),
                Phase("retrieve_policy", ("policy.search",), "...", at="policy"), ...),
        effects=(Effect("refunds.create", "refunds.get_by_key", "idempotency_key",
                        key="refund:{request_id}:{payment_id}"),),
        policy=POL_REF_004, claims=(DuplicateCharge, RefundSubmitted, ...))

The workflow reads it: what a task is pinned to (`pinned`), the order of its phases (`order`,
`after`), the tools a phase may show the model (`phase(name).tools`), how an effect is keyed
and reconciled (`effect(tool)`), the policy the gate decides by (`authorize`, at the task's
version: `policy_at`) and the claim classes a reply is parsed as. `check(registry)` holds the
tools a process registers to the declaration (the versions pinned, each effect's key template
and lookup), so a registry that drifted from what tasks are pinned to fails at start, not in
the middle of a task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agent_jobs.agents.declare import Effect
from agent_jobs.agents.facts import Facts
from agent_jobs.agents.policy import Call, Policy
from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import ConfigError
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.tools import ToolDescriptor, ToolRegistry

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class Phase:
    """A decision point with its own tool scope: the model is shown, and may run, only `tools`
    (none: it drafts); `instruction` is what it is told the step is for; `at` is the task phase
    (a name in the declaration's `order`) it runs in, its own name unless given."""

    name: str
    tools: tuple[str, ...] = ()
    instruction: str = ""
    at: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", self.at or self.name)
        if not _NAME.match(self.name) or not _NAME.match(self.at):
            raise ConfigError(f"phase {self.name[:70]!r}: a snake_case name")
        object.__setattr__(self, "tools", tuple(self.tools))


@dataclass(frozen=True)
class Declaration:
    """An agent's declaration (see the module docstring). Immutable; checked when built."""

    name: str
    version: int
    prompt: str
    prompt_version: str
    model_route: str
    tools: Mapping[str, str]
    phases: Sequence[Phase]
    effects: Sequence[Effect]
    policy: Policy
    # The kinds of claim a reply may make: pydantic models with a `type` literal, checked by
    # the agent's verifier against the facts (`agents.Claim` subclasses carry their own check).
    claims: Sequence[type[BaseModel]] = ()
    # Superseded versions of `policy` still shipped, to decide tasks pinned to them (a release
    # pins its policy version) and to replay old decisions.
    policies: Sequence[Policy] = ()
    # The task phases in the order a task goes through them (`after`); the decision points
    # run in some of them (`Phase.at`), deterministic code in the others (a confirming read,
    # verification). Empty: the decision points' own order.
    order: Sequence[str] = ()
    _phases: dict[str, Phase] = field(init=False, repr=False, compare=False)
    _effects: dict[str, Effect] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"agent {self.name[:70]}"
        if not _NAME.match(self.name) or self.version < 1:
            raise ConfigError(f"{where}: a snake_case name and a version >= 1")
        if not self.prompt.strip() or not self.prompt_version.strip():
            raise ConfigError(f"{where}: the prompt and its version are required")
        object.__setattr__(self, "tools", dict(self.tools))
        object.__setattr__(self, "phases", tuple(self.phases))
        object.__setattr__(self, "effects", tuple(self.effects))
        object.__setattr__(self, "claims", tuple(self.claims))
        object.__setattr__(self, "policies", tuple(self.policies))
        object.__setattr__(self, "order", tuple(self.order) or tuple(p.at for p in self.phases))
        if len(set(self.order)) != len(self.order) or not all(map(_NAME.match, self.order)):
            raise ConfigError(f"{where}: the order names each phase once, in snake_case")
        stray = sorted({p.at for p in self.phases} - set(self.order))
        if stray:
            raise ConfigError(f"{where}: decision points in no ordered phase: {', '.join(stray)}")
        versions = [p.version for p in (self.policy, *self.policies)]
        if len(set(versions)) != len(versions):
            raise ConfigError(f"{where}: a policy version declared twice")
        phases = {p.name: p for p in self.phases}
        effects = {e.tool: e for e in self.effects}
        if len(phases) != len(self.phases) or len(effects) != len(self.effects):
            raise ConfigError(f"{where}: a phase or an effect declared twice")
        used = {t for p in self.phases for t in p.tools}
        used |= {t for e in self.effects for t in (e.tool, e.lookup)}
        unknown = sorted(used - set(self.tools))
        if unknown:
            raise ConfigError(f"{where}: tools used but not declared: {', '.join(unknown)}")
        for e in self.effects:
            if not e.key or "{" not in e.key:
                raise ConfigError(f"{where}: effect {e.tool} needs a key template")
        kinds = [self.claim_type(c) for c in self.claims]
        if len(set(kinds)) != len(kinds):
            raise ConfigError(f"{where}: a claim type declared twice")
        object.__setattr__(self, "_phases", phases)
        object.__setattr__(self, "_effects", effects)

    @property
    def workflow(self) -> str:
        return f"{self.name}@{self.version}"

    def pinned(self) -> dict[str, Any]:
        """What a new task is pinned to: prompt, model route, policy version, tool versions."""
        return {
            "prompt": self.prompt_version,
            "model_route": self.model_route,
            "policy": self.policy.version,
            "tools": dict(self.tools),
        }

    def phase(self, name: str) -> Phase:
        try:
            return self._phases[name]
        except KeyError:
            raise ConfigError(f"agent {self.name}: no phase {name[:70]!r}") from None

    def after(self, phase: str) -> str:
        """The task phase that follows `phase` in the declared order."""
        if phase not in self.order or phase == self.order[-1]:
            raise ConfigError(f"agent {self.name}: no phase after {phase[:70]!r}")
        return self.order[self.order.index(phase) + 1]

    def step_at(self, phase: str) -> Phase | None:
        """The decision point that runs in task phase `phase`, or None (deterministic code)."""
        return next((p for p in self.phases if p.at == phase), None)

    def effect(self, tool: str) -> Effect:
        try:
            return self._effects[tool]
        except KeyError:
            raise ConfigError(f"agent {self.name}: {tool[:70]!r} is not an effect") from None

    def policy_at(self, version: str) -> Policy | None:
        """The declared policy at exactly `version` (current or superseded), or None."""
        return next((p for p in (self.policy, *self.policies) if p.version == version), None)

    def authorize(
        self,
        policy: Policy,
        action: Action,
        facts: Facts,
        pinned: Mapping[str, Any],
        *,
        autonomy_minor: int | None = None,
    ) -> wf.Authorization:
        """The gate's decision on `action` under `policy` (one of this agent's): refused when the
        tool is not at the version the task was pinned to (its schema changed under the task),
        else what `policy` decides with the operator's autonomy cap."""
        if action.tool_version != (pinned.get("tools") or {}).get(action.tool):
            return wf.Authorization("deny", policy.version, "tool_version_not_pinned")
        effects = frozenset(e.tool for e in self.effects)
        said = policy.evaluate(
            Call(action.tool, action.args, action.tool_version),
            facts,
            effects,
            autonomy_minor=autonomy_minor,
        )
        if said.kind == "needs_approval":
            return wf.Authorization(said.kind, policy.version, said.reason, policy.approval_ttl_s)
        return wf.Authorization(said.kind, policy.version, said.reason)

    @staticmethod
    def claim_type(model: type[BaseModel]) -> str:
        """A claim model's `type` (the default of its `type` field)."""
        f = model.model_fields.get("type")
        if f is None or not isinstance(f.default, str):
            raise ConfigError(f"claim {model.__name__}: a `type` field with a string default")
        return f.default

    def claim_types(self) -> tuple[str, ...]:
        return tuple(self.claim_type(c) for c in self.claims)

    def check(self, registry: ToolRegistry) -> None:
        """Refuse a registry that is not this declaration's: a declared tool missing or at
        another version, an effect not a write or keyed by another template or reconciled
        through another lookup."""
        where = f"agent {self.workflow}"
        for name, version in self.tools.items():
            d = registry.get(name)
            if not isinstance(d, ToolDescriptor) or d.version != version:
                got = d.version if isinstance(d, ToolDescriptor) else "missing"
                raise ConfigError(f"{where}: tool {name} is declared at {version}, got {got}")
        for e in self.effects:
            d = registry.get(e.tool)
            assert d is not None  # every declared tool was found above
            if not d.is_write or d.idempotency_key_template != e.key:
                raise ConfigError(f"{where}: effect {e.tool} is not the write keyed {e.key}")
            if d.reconcile_tool != e.lookup:
                raise ConfigError(f"{where}: effect {e.tool} reconciles by {d.reconcile_tool}")
