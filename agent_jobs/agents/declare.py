"""An agent's tools as declarations: what each is (a read, or an effect with its key and its
lookup by key), built into the executor's `ToolDescriptor`s.

Three sources, one result: typed Python functions (`Agent.tool` / `Agent.effect`), OpenAPI
operations (`agents.openapi`) and MCP servers (`tools.mcp`). Whatever the source, a tool runs
only through the `ToolExecutor`: argument schema, step scope, operator switches, the policy
stamp bound to the action hash, the idempotency key derived from the template, audit.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agent_jobs.agents.functions import (
    KEY_PARAM,
    FunctionAdapter,
    args_model,
    args_schema,
    as_json_object,
    describe,
)
from agent_jobs.core.errors import ConfigError
from agent_jobs.tools.adapter import PythonCallableAdapter
from agent_jobs.tools.descriptors import NO_RETRY, RetryPolicy, ToolDescriptor
from agent_jobs.tools.mcp import McpToolAdapter
from agent_jobs.tools.mcp_content import as_object

# The steps of an agent: `work` offers every tool to the model, `reply` (after an effect) only
# the reads; `execute` and `reconcile` are the orchestrator's, never offered to a model.
WORK = "work"
REPLY = "reply"
EXECUTE = "execute"
RECONCILE = "reconcile"
MODEL_STEPS = (WORK, REPLY)
LOOKUP_SUFFIX = ".by_key"
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Effect:
    """How an effect is reconciled: its lookup tool and the argument that carries the key.
    `key`: its key template, when declared apart from the tool (a `Declaration`); the executor
    derives keys from the tool's descriptor, which `Declaration.check` holds to this one."""

    tool: str
    lookup: str
    lookup_arg: str
    key: str | None = None


def versioned(version: str, schema: dict[str, Any]) -> str:
    """A tool's version names its schema too: an approval given for one schema does not carry
    over to a changed one (the action hash includes the version)."""
    digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:12]
    return f"{version}+{digest}"


def function_read(
    fn: Callable[..., Any],
    name: str,
    *,
    steps: Iterable[str],
    version: str,
    timeout_s: float,
    retry: RetryPolicy,
) -> ToolDescriptor:
    """A read from a typed function."""
    scopes = frozenset(steps)
    if not scopes or not scopes <= set(MODEL_STEPS):
        raise ConfigError(f"tool {name}: steps must be among {MODEL_STEPS}")
    model = args_model(fn, exclude=frozenset())
    schema = args_schema(model)
    return ToolDescriptor(
        name=name,
        version=versioned(version, schema),
        description=describe(fn),
        args_schema=schema,
        side_effect="none",
        permission=f"agent-read:{name}",
        step_scopes=scopes,
        timeout_s=timeout_s,
        adapter=PythonCallableAdapter(
            FunctionAdapter(fn, model, takes_key=False), takes_invocation=True
        ),
        retry=retry,
    )


def function_effect(
    fn: Callable[..., Any],
    name: str,
    *,
    key: str,
    lookup: Callable[[str], Any],
    version: str,
    timeout_s: float,
) -> tuple[ToolDescriptor, ToolDescriptor, Effect]:
    """An effect from a typed function, keyed by `key` (a template over its arguments and
    `tenant_id`, `task_id`, `request_id`), with `lookup(idempotency_key)` answering what the
    effect under a key did (None: nothing)."""
    model = args_model(fn, exclude=frozenset({KEY_PARAM}))
    schema = args_schema(model)
    lookup_name = name + LOOKUP_SUFFIX
    takes_key = KEY_PARAM in inspect.signature(fn).parameters
    effect = ToolDescriptor(
        name=name,
        version=versioned(version, schema),
        description=describe(fn),
        args_schema=schema,
        side_effect="keyed",
        permission=f"agent-effect:{name}",
        step_scopes=frozenset({EXECUTE}),
        timeout_s=timeout_s,
        adapter=PythonCallableAdapter(
            FunctionAdapter(fn, model, takes_key=takes_key), takes_invocation=True
        ),
        idempotency_key_template=key,
        reconcile_tool=lookup_name,
    )

    def by_key(args: dict[str, Any]) -> Any:
        return {"found": as_json_object(lookup(str(args[KEY_PARAM]))) or None}

    reader = ToolDescriptor(
        name=lookup_name,
        version=version,
        description=f"The effect of {name} under an idempotency key.",
        args_schema={
            "type": "object",
            "properties": {KEY_PARAM: {"type": "string", "minLength": 1, "maxLength": 255}},
            "required": [KEY_PARAM],
            "additionalProperties": False,
        },
        side_effect="none",
        permission=f"agent-read:{lookup_name}",
        step_scopes=frozenset({RECONCILE}),
        timeout_s=timeout_s,
        adapter=PythonCallableAdapter(by_key),
        retry=NO_RETRY,
    )
    return effect, reader, Effect(name, lookup_name, KEY_PARAM)


def stored(tool: ToolDescriptor | None, result: Any) -> Any:
    """What a tool answered, as an agent keeps it (facts, transcript, outcome, the effect found
    by its key): one JSON object whatever the tool's source. A function's dict (or pydantic
    model), an HTTP body (`{}` when empty), an MCP result's structured content (`{"text": ...}`
    when it sent only text). Claims, rules and the reconcile check then read one shape whether
    the effect was answered directly or found by its key."""
    if tool is not None and isinstance(tool.adapter, McpToolAdapter) and isinstance(result, dict):
        return as_object(result)
    return {} if result is None else result


def found_of(result: Any) -> dict[str, Any] | None:
    """What a lookup answered (as `stored`), as the effect found (None: no effect under the
    key). Accepts `{"found": ...}` (functions, MCP servers that say so: `{"found": null}` or
    `{"found": false}` is none, `{"found": true, ...fields}` the effect inline), or the effect's
    object itself (an HTTP lookup)."""
    if isinstance(result, dict) and "found" in result:
        found = result["found"]
        if found is True:  # `{"found": true, ...fields}`
            return {k: v for k, v in result.items() if k != "found"}
        result = found
    return dict(result) if isinstance(result, dict) and result else None
