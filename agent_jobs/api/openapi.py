"""The OpenAPI document, corrected where FastAPI's generator cannot know the truth:

- `Idempotency-Key` is required (the handler, not the framework, answers 400 when it is missing,
  so the framework sees it as optional) and has the core's pattern;
- `TaskCreate.workflow` lists the registered workflows;
- no operation mentions FastAPI's default validation error: every 422 is an `ErrorBody`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from agent_jobs.api.models import IDEMPOTENCY_KEY_PATTERN

_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


def _fix_operation(op: dict[str, Any]) -> None:
    for param in op.get("parameters", []):
        if param.get("in") == "header" and param.get("name") == "Idempotency-Key":
            param["required"] = True
            param["schema"] = {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "pattern": IDEMPOTENCY_KEY_PATTERN,
                "title": "Idempotency-Key",
            }
            param["example"] = "req-8472"
    for response in op.get("responses", {}).values():
        content = response.get("content", {}).get("application/json")
        if content and "HTTPValidationError" in str(content.get("schema", {})):
            content["schema"] = dict(_ERROR_REF)


def build_openapi(app: FastAPI, workflows: list[str], max_body_bytes: int) -> dict[str, Any]:
    """FastAPI's document with the corrections listed in the module doc."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=f"{app.description}\n\nRequest bodies are limited to {max_body_bytes} bytes.",
        routes=app.routes,
    )
    for path in schema.get("paths", {}).values():
        for op in path.values():
            _fix_operation(op)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        if name in components and name not in str(schema["paths"]):
            del components[name]
    create = components.get("TaskCreate", {}).get("properties", {}).get("workflow")
    if create is not None and workflows:
        create["enum"] = sorted(workflows)
        create["examples"] = [sorted(workflows)[0]]
    return schema


def install_openapi(app: FastAPI, workflows: list[str], max_body_bytes: int) -> None:
    """Serve the corrected document at /openapi.json (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, workflows, max_body_bytes)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
