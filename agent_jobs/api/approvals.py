"""`/v1/approvals`: an approver lists the pending actions of their tenant and grants or denies one.

The approver is the token's subject (role `approver` required) and is never the requester of the
task, compared as `core.identity.principal` does (case, width and spacing variants of one name are
one person): checked here for a clear 403 `self_approval`, and again by the store (which raises
`SelfApproval`, also a 403) and a database constraint.

A decision's `note` follows the content rule (`core.text`), like a task's input: kept as given,
except a NUL, which no store can hold, becomes U+FFFD (a lone surrogate escape never gets this
far: the JSON parser refuses it as a string, 422 `field: note`).

A plan's effects asked for together (an agent's `approve_plan`) are a group: each its own approval
(bound to its own action hash, used once), listed by `GET /v1/approvals/{id}/group` in the plan's
order, and decided in one decision: granting or denying any of them decides them all."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query, Request

from agent_jobs.api import responses as r
from agent_jobs.api.auth import Principal
from agent_jobs.api.deps import approver, state
from agent_jobs.api.errors import HttpError
from agent_jobs.api.models import ID_PATTERN, Approval, ApprovalDecision, ApprovalList
from agent_jobs.core.contracts import ApprovalStatus
from agent_jobs.core.identity import same_principal

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])

ApprovalId = Annotated[str, Path(pattern=ID_PATTERN, description="The approval's id.")]
Approver = Annotated[Principal, Depends(approver)]


@router.get(
    "",
    response_model=ApprovalList,
    summary="List approvals of the caller's tenant",
    responses=r.errors(401, 403, 413, 422, 503),
)
def list_approvals(
    request: Request,
    who: Approver,
    status: Annotated[
        ApprovalStatus | None, Query(description="Only approvals in this status.")
    ] = None,
    task_id: Annotated[
        str | None, Query(pattern=ID_PATTERN, description="Only this task's approvals.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ApprovalList:
    views = state(request).runtime.store.list_approvals(
        who.tenant_id, status=status, task_id=task_id, limit=limit
    )
    return ApprovalList(approvals=[Approval.from_view(v) for v in views])


@router.get(
    "/{approval_id}/group",
    response_model=ApprovalList,
    summary="The approvals decided together with this one",
    description="The effects of a plan asked for in one approval, in the plan's order (the one "
    "its task waits on first); just this approval when it is not in a group.",
    responses=r.errors(401, 403, 404, 413, 422, 503),
)
def approval_group(approval_id: ApprovalId, request: Request, who: Approver) -> ApprovalList:
    views = state(request).runtime.store.approval_group(approval_id, who.tenant_id)
    return ApprovalList(approvals=[Approval.from_view(v) for v in views])


def _decide(request: Request, who: Principal, approval_id: str, grant: bool, note: str) -> Approval:
    rt = state(request).runtime
    current = rt.store.approval(approval_id, who.tenant_id)  # another tenant's: 404
    if same_principal(current.requester, who.subject):
        raise HttpError(403, "self_approval", "the requester of a task cannot approve its actions")
    view = rt.orchestrator.decide_approval(
        approval_id, who.subject, grant=grant, tenant_id=who.tenant_id, note=note
    )
    return Approval.from_view(view)


_DECISION_ERRORS = r.errors(401, 403, 404, 409, 413, 422, 503)
OptionalDecision = Annotated[ApprovalDecision | None, Body()]


@router.post(
    "/{approval_id}/grant",
    response_model=Approval,
    summary="Grant a pending approval",
    description="Binds the grant to the approval's exact action hash and policy version; it "
    "expires and is single-use. 409 when the approval is no longer pending. An approval of a "
    "group is granted with its whole group (one grant per action hash).",
    responses=_DECISION_ERRORS,
)
def grant(
    approval_id: ApprovalId, request: Request, who: Approver, body: OptionalDecision = None
) -> Approval:
    return _decide(request, who, approval_id, True, body.note if body else "")


@router.post(
    "/{approval_id}/deny",
    response_model=Approval,
    summary="Deny a pending approval",
    description="An approval of a group is denied with its whole group: none of it is sent.",
    responses=_DECISION_ERRORS,
)
def deny(
    approval_id: ApprovalId, request: Request, who: Approver, body: OptionalDecision = None
) -> Approval:
    return _decide(request, who, approval_id, False, body.note if body else "")
