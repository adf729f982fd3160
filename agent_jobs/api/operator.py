"""`/v1/ops`: the incident levers over HTTP, for a token with the `operator` role.

An operator acts within the tenant of their token (tenants are walls, invariant 7): they switch
levers for that tenant, query that tenant's incidents and replay its dead letters. Levers for
every tenant at once are the platform's, changed with `agent-jobs ops` by whoever runs it.
Every change names its author (the token's subject) and needs a reason: it is the audit record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from pydantic import BaseModel, Field

from agent_jobs.api import responses as r
from agent_jobs.api.auth import Principal
from agent_jobs.api.deps import principal, state
from agent_jobs.api.errors import HttpError
from agent_jobs.api.models import ID_PATTERN
from agent_jobs.core.contracts import EffectView
from agent_jobs.core.errors import InvalidInput
from agent_jobs.ops.service import OpsService, from_runtime
from agent_jobs.ops.switches import Kind
from agent_jobs.store.ops import IncidentFilter

OPERATOR = "operator"

router = APIRouter(prefix="/v1/ops", tags=["ops"])


def operator(who: Principal = Depends(principal)) -> Principal:  # noqa: B008
    """The verified caller, who must hold the `operator` role (403 otherwise)."""
    if not who.has_role(OPERATOR):
        raise HttpError(403, "forbidden", f"the {OPERATOR!r} role is required")
    return who


Operator = Annotated[Principal, Depends(operator)]


class SwitchOut(BaseModel):
    kind: str
    tenant_id: str
    target: str
    value: Any
    actor: str
    reason: str
    changed_at: datetime


class SwitchChangeIn(BaseModel):
    target: str = Field("", max_length=128, description="the tool or workflow, if the kind has one")
    value: Any = Field(True, description="true, or a number for numeric switches")
    reason: str = Field(min_length=1, max_length=1000, description="why (the audit record)")


class SwitchClearIn(BaseModel):
    target: str = Field("", max_length=128)
    reason: str = Field(min_length=1, max_length=1000)


class SwitchList(BaseModel):
    switches: list[SwitchOut]


class SwitchChangeOut(BaseModel):
    id: int
    kind: str
    tenant_id: str = Field(description='the tenant, or "" for a platform-wide switch')
    target: str
    value: Any = Field(description="the value it was set to; null when it was turned off")
    actor: str
    reason: str
    at: datetime


class SwitchHistory(BaseModel):
    changes: list[SwitchChangeOut]


class IncidentTaskOut(BaseModel):
    task_id: str
    tenant_id: str
    workflow: str
    status: str
    created_at: datetime
    updated_at: datetime
    pinned: dict[str, Any]
    policy_versions: list[str]
    tools_used: list[str]
    effects: list[EffectView]


class IncidentTasks(BaseModel):
    tasks: list[IncidentTaskOut]


class ReplayIn(BaseModel):
    reason: str = Field(min_length=1, max_length=1000)


class ReplayOut(BaseModel):
    task_id: str
    replayed: bool
    reason: str
    resumed_as: str | None = None


def _ops(request: Request) -> OpsService:
    return from_runtime(state(request).runtime)


def _bad(exc: InvalidInput) -> HttpError:
    return HttpError(422, "invalid_switch", str(exc))


@router.get("/switches", response_model=SwitchList, responses=r.errors(401, 403, 503),
            summary="The switches on now that apply to the caller's tenant")  # fmt: skip
def list_switches(request: Request, who: Operator) -> SwitchList:
    rows = [s for s in _ops(request).switches() if s.tenant_id in ("", who.tenant_id)]
    return SwitchList(switches=[SwitchOut(**s.__dict__) for s in rows])


@router.get("/switches/history", response_model=SwitchHistory,
            responses=r.errors(401, 403, 422, 503),
            summary="The audit trail: changes to the caller's tenant's switches and the "
            "platform-wide ones, newest first")  # fmt: skip
def switch_history(
    request: Request, who: Operator, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> SwitchHistory:
    rows = _ops(request).history(limit=limit, tenant_ids=("", who.tenant_id))
    return SwitchHistory(changes=[SwitchChangeOut(**c.__dict__) for c in rows])


@router.put("/switches/{kind}", response_model=SwitchOut, responses=r.errors(401, 403, 422, 503),
            summary="Turn a switch on for the caller's tenant")  # fmt: skip
def set_switch(
    request: Request,
    who: Operator,
    kind: Annotated[Kind, Path()],
    body: Annotated[SwitchChangeIn, Body()],
) -> SwitchOut:
    try:
        row = _ops(request).set(
            kind.value,
            tenant_id=who.tenant_id,
            target=body.target,
            value=body.value,
            actor=who.subject,
            reason=body.reason,
        )
    except InvalidInput as exc:
        raise _bad(exc) from None
    return SwitchOut(**row.__dict__)


@router.post("/switches/{kind}/clear", response_model=SwitchList,
             responses=r.errors(401, 403, 422, 503),
             summary="Turn a switch off for the caller's tenant")  # fmt: skip
def clear_switch(
    request: Request,
    who: Operator,
    kind: Annotated[Kind, Path()],
    body: Annotated[SwitchClearIn, Body()],
) -> SwitchList:
    ops = _ops(request)
    try:
        ops.clear(kind.value, tenant_id=who.tenant_id, target=body.target, actor=who.subject,
                  reason=body.reason)  # fmt: skip
    except InvalidInput as exc:
        raise _bad(exc) from None
    rows = [s for s in ops.switches() if s.tenant_id in ("", who.tenant_id)]
    return SwitchList(switches=[SwitchOut(**s.__dict__) for s in rows])


@router.get("/incidents/tasks", response_model=IncidentTasks,
            responses=r.errors(401, 403, 422, 503),
            summary="The caller's tasks in a window that used a tool, prompt, route, "
            "workflow or policy version, with their effects")  # fmt: skip
def incident_tasks(  # noqa: PLR0917 - FastAPI reads query parameters from the signature
    request: Request,
    who: Operator,
    since: datetime,
    until: datetime,
    tool: Annotated[str | None, Query(max_length=128)] = None,
    tool_version: Annotated[str | None, Query(max_length=32)] = None,
    prompt: Annotated[str | None, Query(max_length=128)] = None,
    model_route: Annotated[str | None, Query(max_length=128)] = None,
    workflow: Annotated[str | None, Query(max_length=80)] = None,
    policy_version: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> IncidentTasks:
    if since.tzinfo is None or until.tzinfo is None:
        raise HttpError(422, "invalid_window", "since and until need a time zone (e.g. Z)")
    f = IncidentFilter(since=since, until=until, tool=tool, tool_version=tool_version,
                       prompt=prompt, model_route=model_route, workflow=workflow,
                       policy_version=policy_version, tenant_id=who.tenant_id)  # fmt: skip
    try:
        rows = _ops(request).incident_tasks(f, limit=limit)
    except InvalidInput as exc:
        raise HttpError(422, "invalid_window", str(exc)) from None
    return IncidentTasks(tasks=[IncidentTaskOut(**t.__dict__) for t in rows])


@router.post("/dead-letters/{task_id}/replay", response_model=ReplayOut,
             responses=r.errors(401, 403, 404, 422, 503),
             summary="Resume a dead-lettered task from its checkpoint (idempotent)")  # fmt: skip
def replay(
    request: Request,
    who: Operator,
    task_id: Annotated[str, Path(pattern=ID_PATTERN)],
    body: Annotated[ReplayIn, Body()],
) -> ReplayOut:
    rt = state(request).runtime
    rt.store.get(task_id, who.tenant_id)  # another tenant's task: 404
    result = _ops(request).replay(task_id, actor=who.subject, why=body.reason)
    return ReplayOut(task_id=result.task_id, replayed=result.replayed, reason=result.reason,
                     resumed_as=result.resumed_as)  # fmt: skip
