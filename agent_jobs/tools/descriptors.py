"""Tool descriptors: everything the executor must know about a tool before it may call it."""

from __future__ import annotations

import copy
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

from agent_jobs.core.errors import ConfigError
from agent_jobs.core.schema_check import CheckedSchema
from agent_jobs.tools.adapter import Adapter

SideEffect = Literal["none", "idempotent", "keyed"]

# Fields an idempotency key template may use besides the tool's own arguments. They come from the
# trusted execution context, so a key names the action (request + payment), never the attempt.
CONTEXT_KEY_FIELDS = frozenset({"request_id", "task_id", "tenant_id"})


@dataclass(frozen=True)
class RetryPolicy:
    """Automatic retries for reads on transient failure; backoff doubles after each attempt.

    Writes never retry inside the executor: a write whose outcome is unknown is reconciled by
    the orchestrator through the tool's reconcile read, not re-sent blindly.
    """

    max_attempts: int = 1
    backoff_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.backoff_s < 0:
            raise ConfigError("retry policy needs max_attempts >= 1 and backoff_s >= 0")

    def delay_s(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        return float(self.backoff_s * (2 ** (attempt - 1)))


NO_RETRY = RetryPolicy()


def _check_schema(name: str, schema: Mapping[str, Any]) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        raise ConfigError(f"tool {name}: invalid args schema: {e.message}") from None
    # Closed objects only: an extra argument is how an injected "destination account" would try
    # to travel, so the schema itself must refuse unknown keys.
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise ConfigError(
            f"tool {name}: args schema must be an object with additionalProperties false"
        )
    props = schema.get("properties", {})
    missing = [r for r in schema.get("required", []) if r not in props]
    if missing:
        raise ConfigError(f"tool {name}: required fields not in properties: {missing}")


@dataclass(frozen=True, eq=False)
class ToolDescriptor:
    """A registered tool. Construction validates the descriptor, so a bad one fails at startup.

    `side_effect`: `none` (a read), `idempotent` (a write safe to repeat), `keyed` (a write that is
    non-idempotent unless keyed: it needs `idempotency_key_template` and `reconcile_tool`, the
    read that answers "did this happen?" by idempotency key). `step_scopes` are the workflow steps
    that may use the tool; `permission` is the role its credential carries.
    """

    name: str
    version: str
    description: str
    args_schema: Mapping[str, Any]
    side_effect: SideEffect
    permission: str
    step_scopes: frozenset[str]
    timeout_s: float
    adapter: Adapter = field(repr=False)
    retry: RetryPolicy = NO_RETRY
    idempotency_key_template: str | None = None
    reconcile_tool: str | None = None
    credential_ttl_s: int = 60
    _checked: CheckedSchema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        schema = copy.deepcopy(dict(self.args_schema))
        _check_schema(self.name, schema)
        object.__setattr__(self, "args_schema", schema)
        object.__setattr__(self, "_checked", CheckedSchema.of(schema))
        object.__setattr__(self, "step_scopes", frozenset(self.step_scopes))
        if self.timeout_s <= 0:
            raise ConfigError(f"tool {self.name}: timeout_s must be positive")
        if self.is_write and self.retry.max_attempts != 1:
            raise ConfigError(f"tool {self.name}: writes never retry inside the executor")
        if self.side_effect == "keyed":
            self._check_keyed(schema)

    def _check_keyed(self, schema: Mapping[str, Any]) -> None:
        if not self.idempotency_key_template or not self.reconcile_tool:
            raise ConfigError(
                f"tool {self.name}: a keyed tool needs idempotency_key_template and reconcile_tool"
            )
        names = {f for _, f, _, _ in string.Formatter().parse(self.idempotency_key_template) if f}
        known = set(schema.get("properties", {})) | CONTEXT_KEY_FIELDS
        if not names or not names <= known:
            raise ConfigError(
                f"tool {self.name}: key template fields {sorted(names - known)} are neither "
                "arguments nor context fields"
            )
        # A key built from optional arguments could silently differ between two identical actions.
        optional = names - CONTEXT_KEY_FIELDS - set(schema.get("required", []))
        if optional:
            raise ConfigError(
                f"tool {self.name}: key template uses optional args {sorted(optional)}"
            )

    @property
    def is_write(self) -> bool:
        return self.side_effect != "none"

    def validate_args(self, args: Mapping[str, Any]) -> list[str]:
        """Schema violations, most specific first; empty when the arguments are acceptable (a
        valid call is recognised by the fast check, `core.schema_check`, where it applies)."""
        errors = sorted(self._checked.errors(dict(args)), key=lambda e: list(e.path))
        return [f"{'/'.join(str(p) for p in e.path) or '(args)'}: {e.message}" for e in errors]
