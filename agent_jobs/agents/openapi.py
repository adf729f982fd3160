"""OpenAPI operations as an agent's tools: `operationId` -> tool, executed by the HTTP adapter.

    orders = openapi_tools(
        spec,  # the OpenAPI 3 document, as a dict (json.load / yaml.safe_load it)
        prefix="orders",
        base_url_setting="ORDERS_URL",  # the environment variable with the base URL, read at
        base_url=None,                  # each call; `base_url`: its default when unset
        operations={
            "getOrder": read(),
            "cancelOrder": effect(key="cancel:{tenant_id}:{order_id}", lookup="getCancellation"),
            "getCancellation": lookup(),
        },
    )

Only the operations named are exposed (the declaration is the allow-list). The argument schema
is built from the operation's path and query parameters and its `application/json` request body
(an object), closed; a header or cookie parameter, a `$ref` outside `#/components/schemas`, or a
body that is not an object is refused at declaration. What an operation is (read, effect, lookup)
is ours to say, never inferred from its method: a `GET` that moves money exists.

An effect's key travels in the `Idempotency-Key` header (as with every HTTP tool); its lookup is
an operation taking the key in `lookup_arg` and answering the effect (200) or 404 (none).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import requests

from agent_jobs.agents.declare import (
    DEFAULT_TIMEOUT_S,
    EXECUTE,
    MODEL_STEPS,
    RECONCILE,
    Effect,
    versioned,
)
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.text import clean_text, cut
from agent_jobs.tools.descriptors import ToolDescriptor
from agent_jobs.tools.http import HttpAdapter, SystemsConfig

_METHODS = ("get", "put", "post", "delete", "patch")
MAX_DESCRIPTION_CHARS = 1000


@dataclass(frozen=True)
class Operation:
    """What we declare an operation is. Build with `read()`, `effect()`, `lookup()`."""

    kind: Literal["read", "effect", "lookup"]
    steps: tuple[str, ...] = MODEL_STEPS
    key: str | None = None
    lookup: str | None = None
    lookup_arg: str = "idempotency_key"
    timeout_s: float = DEFAULT_TIMEOUT_S
    version: str = "1"


def read(*, steps: Iterable[str] = MODEL_STEPS, timeout_s: float = DEFAULT_TIMEOUT_S) -> Operation:
    return Operation("read", tuple(steps), timeout_s=timeout_s)


def effect(
    *,
    key: str,
    lookup: str,
    lookup_arg: str = "idempotency_key",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Operation:
    """A keyed write; `lookup` is the operationId of its lookup by key."""
    return Operation("effect", key=key, lookup=lookup, lookup_arg=lookup_arg, timeout_s=timeout_s)


def lookup(*, timeout_s: float = DEFAULT_TIMEOUT_S) -> Operation:
    """A read only the orchestrator calls, to reconcile an effect by its key."""
    return Operation("lookup", timeout_s=timeout_s)


@dataclass(frozen=True)
class OpenApiTools:
    descriptors: tuple[ToolDescriptor, ...]
    effects: tuple[Effect, ...]


def openapi_tools(
    document: Mapping[str, Any],
    *,
    prefix: str,
    base_url_setting: str,
    operations: Mapping[str, Operation],
    base_url: str | None = None,
    config: SystemsConfig | None = None,
    session: requests.Session | None = None,
) -> OpenApiTools:
    """Descriptors for the named operations of `document` (see the module docstring).
    `session` carries the requests (default: each adapter's own); a simulator or a test mounts
    its own transport on one to answer in-process."""
    found = _operations(document)
    missing = sorted(set(operations) - set(found))
    if missing:
        raise ConfigError(f"openapi {prefix}: no operation {missing[0]!r} in the document")
    # The setting is an environment variable of the worker, read at each call (a moved service
    # is followed without a restart); `base_url` is its default when unset.
    systems = config or SystemsConfig(
        defaults={base_url_setting: base_url} if base_url else {}, environ=os.environ
    )
    out: list[ToolDescriptor] = []
    effects: list[Effect] = []
    for op_id, decl in operations.items():
        method, path, op = found[op_id]
        name = f"{prefix}.{op_id}"
        schema = _schema(document, op_id, op)
        if decl.kind == "effect":
            used = operations.get(decl.lookup or "")
            if used is None or used.kind != "lookup":
                raise ConfigError(
                    f"openapi {name}: lookup {decl.lookup!r} is not a declared lookup"
                )
            effects.append(Effect(name, f"{prefix}.{decl.lookup}", decl.lookup_arg))
        scopes = {"read": frozenset(decl.steps), "effect": {EXECUTE}, "lookup": {RECONCILE}}
        out.append(
            ToolDescriptor(
                name=name,
                version=versioned(decl.version, schema),
                description=cut(
                    clean_text(str(op.get("summary") or op.get("description") or "")),
                    MAX_DESCRIPTION_CHARS,
                ),
                args_schema=schema,
                side_effect="keyed" if decl.kind == "effect" else "none",
                permission=f"openapi:{name}",
                step_scopes=frozenset(scopes[decl.kind]),
                timeout_s=decl.timeout_s,
                adapter=HttpAdapter(
                    method, path, base_url_setting, config=systems, session=session
                ),
                idempotency_key_template=decl.key,
                reconcile_tool=f"{prefix}.{decl.lookup}" if decl.kind == "effect" else None,
            )
        )
    return OpenApiTools(tuple(out), tuple(effects))


def _operations(document: Mapping[str, Any]) -> dict[str, tuple[str, str, Mapping[str, Any]]]:
    paths = document.get("paths")
    if not isinstance(paths, Mapping):
        raise ConfigError("openapi document has no paths")
    out: dict[str, tuple[str, str, Mapping[str, Any]]] = {}
    for path, item in paths.items():
        if not isinstance(item, Mapping):
            continue
        shared = list(item.get("parameters") or [])
        for method in _METHODS:
            op = item.get(method)
            if isinstance(op, Mapping) and isinstance(op.get("operationId"), str):
                merged = {**op, "parameters": [*shared, *(op.get("parameters") or [])]}
                out[op["operationId"]] = (method.upper(), str(path), merged)
    return out


def _resolve(document: Mapping[str, Any], node: Any, where: str) -> Any:
    """Inline local `#/components/schemas/...` references (bounded: no cycles)."""

    def walk(value: Any, depth: int) -> Any:
        if depth > 20:
            raise ConfigError(f"openapi {where}: schema nested too deeply (a reference cycle?)")
        if isinstance(value, Mapping):
            ref = value.get("$ref")
            if isinstance(ref, str):
                if not ref.startswith("#/components/schemas/"):
                    raise ConfigError(
                        f"openapi {where}: only local schema references ({ref[:80]!r})"
                    )
                target: Any = document
                for part in ref[2:].split("/"):
                    target = target.get(part) if isinstance(target, Mapping) else None
                if target is None:
                    raise ConfigError(f"openapi {where}: unresolved reference {ref[:80]!r}")
                return walk(target, depth + 1)
            return {k: walk(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, depth + 1) for v in value]
        return copy.deepcopy(value)

    return walk(node, 0)


def _schema(document: Mapping[str, Any], op_id: str, op: Mapping[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for raw in op.get("parameters") or []:
        param = _resolve(document, raw, op_id)
        where = param.get("in")
        if where not in ("path", "query"):
            raise ConfigError(f"openapi {op_id}: parameter in {where!r} is not supported")
        props[param["name"]] = _resolve(document, param.get("schema") or {"type": "string"}, op_id)
        if param.get("required") or where == "path":
            required.append(param["name"])
    body = ((op.get("requestBody") or {}).get("content") or {}).get("application/json")
    if body is not None:
        schema = _resolve(document, body.get("schema") or {}, op_id)
        if schema.get("type") != "object":
            raise ConfigError(f"openapi {op_id}: the JSON body must be an object")
        clash = set(schema.get("properties") or {}) & set(props)
        if clash:
            raise ConfigError(f"openapi {op_id}: {sorted(clash)} both parameter and body field")
        props.update(schema.get("properties") or {})
        required += list(schema.get("required") or [])
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }
