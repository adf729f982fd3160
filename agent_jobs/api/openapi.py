"""The OpenAPI document, corrected where FastAPI's generator cannot know the truth:

- `Idempotency-Key` is required (the handler, not the framework, answers 400 when it is missing,
  so the framework sees it as optional) and has the core's pattern;
- `TaskCreate.workflow` lists the registered workflows;
- no operation mentions FastAPI's default validation error: every 422 is an `ErrorBody`;
- OpenAPI links say how one answer feeds the next request (a created task's id to read, trace
  and cancel it; its key to find it by key; a listed approval's id to grant or deny it), which
  is what stateful testing (schemathesis) follows.
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


# (source method, path, status) -> {link name: (target method, path, {parameter: expression})}
_LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("post", "/v1/tasks", "202"): {
        "GetTask": ("get", "/v1/tasks/{task_id}", {"task_id": "$response.body#/task_id"}),
        "GetTaskEvents": (
            "get",
            "/v1/tasks/{task_id}/events",
            {"task_id": "$response.body#/task_id"},
        ),
        "CancelTask": (
            "post",
            "/v1/tasks/{task_id}/cancel",
            {"task_id": "$response.body#/task_id"},
        ),
        "GetTaskByKey": (
            "get",
            "/v1/tasks",
            {"idempotency_key": "$request.header.Idempotency-Key"},
        ),
    },
    ("get", "/v1/approvals", "200"): {
        "GrantApproval": (
            "post",
            "/v1/approvals/{approval_id}/grant",
            {"approval_id": "$response.body#/approvals/0/approval_id"},
        ),
        "DenyApproval": (
            "post",
            "/v1/approvals/{approval_id}/deny",
            {"approval_id": "$response.body#/approvals/0/approval_id"},
        ),
    },
}


def _add_links(paths: dict[str, Any]) -> None:
    for (method, path, status), links in _LINKS.items():
        response = paths.get(path, {}).get(method, {}).get("responses", {}).get(status)
        if response is None:
            continue
        out = {}
        for name, (t_method, t_path, params) in links.items():
            target = paths.get(t_path, {}).get(t_method)
            if target is not None and "operationId" in target:
                out[name] = {"operationId": target["operationId"], "parameters": dict(params)}
        if out:
            response["links"] = out


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
    _add_links(schema.get("paths", {}))
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
