"""`/v1/tasks`: submit, find by idempotency key, read, trace, cancel. Every query is scoped by the
token's tenant, so another tenant's task is a 404, exactly like a task that does not exist
(invariant 7)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from agent_jobs.api import responses as r
from agent_jobs.api.auth import Principal
from agent_jobs.api.deps import principal, state
from agent_jobs.api.errors import HttpError
from agent_jobs.api.intake import InvalidIdempotencyKey, SubmitRateLimited, check_key, parse_request
from agent_jobs.api.models import (
    ID_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    CancelAccepted,
    Event,
    EventList,
    Task,
    TaskCreate,
    TaskCreated,
)
from agent_jobs.api.redaction import redact_event_data
from agent_jobs.api.task_wait import DEADLINE_MARGIN_S, MAX_WAIT_S, watch_of
from agent_jobs.core.states import TERMINAL
from agent_jobs.store.task_statuses import statuses

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])

TaskId = Annotated[str, Path(pattern=ID_PATTERN, description="The task's id, e.g. `tsk_...`.")]
Caller = Annotated[Principal, Depends(principal)]


@router.post(
    "",
    status_code=202,
    response_model=TaskCreated,
    summary="Submit a task",
    description="Creates the task, or returns the one this `Idempotency-Key` already created "
    "for the caller's tenant (same payload). The tenant and the requester come from the token.",
    responses=r.merge(
        {202: r.CREATED_HEADERS},
        r.errors(400, 401, 413, 422, 429, 503),
    ),
)
def create_task(
    body: TaskCreate,
    request: Request,
    response: Response,
    who: Caller,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="The client's identity for this request: 1-255 printable ASCII "
            "characters. Required.",
        ),
    ] = None,
) -> TaskCreated:
    st = state(request)
    try:
        key = check_key(idempotency_key)
    except InvalidIdempotencyKey as exc:
        code = "missing_idempotency_key" if not idempotency_key else "invalid_idempotency_key"
        raise HttpError(400, code, str(exc), field="Idempotency-Key") from None
    task_request = parse_request(body.model_dump(), st.runtime.workflows)
    try:
        result = st.intake.submit(who, key, task_request, via="http")
    except SubmitRateLimited as exc:
        raise HttpError(429, exc.code, str(exc), {"Retry-After": str(exc.retry_after_s)}) from None
    task = result.task
    response.headers["Location"] = f"/v1/tasks/{task.id}"
    if not result.created:
        response.headers["Idempotent-Replayed"] = "true"
    return TaskCreated(task_id=task.id, status=task.status, trace_id=task.trace_id)


@router.get(
    "",
    response_model=Task,
    summary="Find a task by its idempotency key",
    description="The caller tenant's task created with this `Idempotency-Key`: how a sender that "
    "did not read the answer to its submission (a Celery-native sender) learns its task id. "
    "Another tenant's key, or a key no task was created with (e.g. a refused submission), "
    "is a 404.",
    responses=r.errors(401, 404, 413, 422, 503),
)
def get_task_by_key(
    request: Request,
    who: Caller,
    idempotency_key: Annotated[
        str,
        Query(
            min_length=1,
            max_length=255,
            pattern=IDEMPOTENCY_KEY_PATTERN,
            description="The `Idempotency-Key` the task was submitted with.",
            examples=["req-8472"],
        ),
    ],
) -> Task:
    try:
        key = check_key(idempotency_key)
    except InvalidIdempotencyKey as exc:
        raise HttpError(422, exc.code, str(exc), field="idempotency_key") from None
    row = state(request).runtime.store.get_by_key(who.tenant_id, key)
    return Task.from_view(row.view())


@router.get(
    "/{task_id}",
    response_model=Task,
    summary="Get a task",
    description="Status (with `display_status`: `awaiting_approval`, `cancel_requested`, ...), "
    "pending action (identity and hash only) and outcome.",
    responses=r.errors(401, 404, 413, 422, 503),
)
async def get_task(
    task_id: TaskId,
    request: Request,
    who: Caller,
    wait: Annotated[
        float | None,
        Query(
            gt=0,
            le=MAX_WAIT_S,
            description="Long poll: answer as soon as the task's status changes, or after this "
            "many seconds with the task as it is (at once when it is finished). Waiting "
            "callers cost no database reads of their own (one watcher per API process).",
        ),
    ] = None,
) -> Task:
    st = state(request)
    store = st.runtime.store
    row = await run_in_threadpool(store.get, task_id, who.tenant_id)
    if wait is not None and row.status not in TERMINAL:
        deadline = st.runtime.settings.api_request_timeout_s
        if deadline > 0:
            wait = max(0.0, min(wait, deadline - DEADLINE_MARGIN_S))
        watch = watch_of(request, partial(statuses, store.engine))
        if await watch.until_changed(row.id, row.status.value, wait):
            row = await run_in_threadpool(store.get, task_id, who.tenant_id)
    return Task.from_view(row.view())


@router.get(
    "/{task_id}/events",
    response_model=EventList,
    summary="The task's trace",
    description="The append-only event log, oldest first, redacted: identities and hashes, "
    "never raw tool arguments or personal data.",
    responses=r.errors(401, 404, 413, 422, 503),
)
def get_events(
    task_id: TaskId,
    request: Request,
    who: Caller,
    after_seq: Annotated[
        int, Query(ge=0, le=2_147_483_647, description="Only events after this sequence number.")
    ] = 0,
) -> EventList:
    views = state(request).runtime.store.events(task_id, who.tenant_id, after_seq=after_seq)
    events = [Event.from_view(v, redact_event_data(v.data)) for v in views]
    return EventList(task_id=task_id, events=events)


@router.post(
    "/{task_id}/cancel",
    status_code=202,
    response_model=CancelAccepted,
    summary="Request cancellation",
    description="Sets the cancel flag, honoured at the task's next step boundary. While an effect "
    "may be in flight (EXECUTING, EXEC_UNKNOWN) the task reads `cancel_requested` until the "
    "effect is resolved. A finished task cannot be cancelled: 409.",
    responses=r.errors(401, 404, 409, 413, 422, 503),
)
def cancel_task(task_id: TaskId, request: Request, who: Caller) -> Any:
    rt = state(request).runtime
    # A finished task is answered here, before the store's cancel: its "nothing to cancel" path
    # re-reads the row inside its own write transaction, which SQLite cannot serve.
    task = rt.store.get(task_id, who.tenant_id)  # another tenant's task: 404
    accepted = False
    if task.status not in TERMINAL:
        result = rt.orchestrator.cancel(task_id, who.tenant_id)
        task, accepted = result.task, result.accepted
    if not accepted:
        raise HttpError(
            409,
            "task_finished",
            f"task {task.id} is already {task.status.value}; nothing to cancel",
        )
    view = task.view()
    return CancelAccepted(
        task_id=task.id,
        status=task.status,
        display_status=view.display_status,
        cancel_requested=view.cancel_requested,
    )
