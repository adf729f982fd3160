"""`Declaration`: what an agent is, as data, for an agent that runs its own workflow hooks.

`Agent` runs the generic tool-calling step (`work`, then `reply`). An agent with a fixed sequence
of decision points of its own (the refund agent: investigate, retrieve policy, decide, draft)
keeps its hooks but declares the rest on this surface, in one place:

    REFUND = Declaration(
        name="refund_resolution", version=3, prompt=SYSTEM, prompt_version="refund-v7",
        model_route="support-tier2@2026-03",
        tools={"orders.get": "1", ..., "refunds.create": "2"},
        phases=(Phase("investigate", ("orders.get", "payments.list"), "Step: investigate ..."),
                ...),
        effects=(Effect("refunds.create", "refunds.get_by_key", "idempotency_key",
                        key="refund:{request_id}:{payment_id}"),),
        policy=POL_REF_004, claims=(DuplicateCharge, RefundSubmitted, ...))

The workflow reads it: what a task is pinned to (`pinned`), the tools a phase may show the model
(`phase(name).tools`), how an effect is keyed and reconciled (`effect(tool)`), the policy version
and thresholds. `check(registry)` holds the tools a process registers to the declaration (the
versions pinned, each effect's key template and lookup), so a registry that drifted from what
tasks are pinned to fails at start, not in the middle of a task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agent_jobs.agents.declare import Effect
from agent_jobs.agents.policy import Policy
from agent_jobs.core.errors import ConfigError
from agent_jobs.tools import ToolDescriptor, ToolRegistry

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class Phase:
    """A decision point with its own tool scope: the model is shown, and may run, only `tools`
    (none: it drafts); `instruction` is what it is told the step is for."""

    name: str
    tools: tuple[str, ...] = ()
    instruction: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
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

    def effect(self, tool: str) -> Effect:
        try:
            return self._effects[tool]
        except KeyError:
            raise ConfigError(f"agent {self.name}: {tool[:70]!r} is not an effect") from None

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
