"""`/v1/console`: the read-only views the web console (`agent_jobs.console`) needs beyond the
public API — an approval with the evidence its policy decision used (for a declared agent, its
facts with their provenance and its plan of effects), a task's timeline in the seed's trace
shape (with that evidence, for approvers), and the caller tenant's queue. Every change of state
the console makes goes through the public routes (`/v1/approvals/{id}/grant`, `/deny`, ...),
never through here.

Scoped exactly like `/v1/tasks` and `/v1/approvals`: the tenant is the verified token's, every
read names it, and another tenant's task is a 404 (invariant 7). Approvals need the `approver`
role, as on `/v1/approvals`. What is shown is what the public API shows, plus, for approvers,
the facts behind the one action they are asked to decide (as `/v1/approvals` shows its
arguments). The trace is `obs.tracing`'s: identities, hashes, counts and outcomes, never a
payload, a prompt or a completion.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from agent_jobs.api import responses as r
from agent_jobs.api.auth import APPROVER, Principal
from agent_jobs.api.deps import approver, principal, state
from agent_jobs.api.models import ID_PATTERN, Approval, Task
from agent_jobs.api.operator import Operator
from agent_jobs.api.redaction import redact_text
from agent_jobs.console import evidence as ev
from agent_jobs.console import timeline as tl
from agent_jobs.core.contracts import ApprovalStatus
from agent_jobs.core.errors import RecordNotFound
from agent_jobs.core.names import tenant_queue
from agent_jobs.core.states import Status
from agent_jobs.obs.queues import oldest_enqueued_at
from agent_jobs.obs.tracing import spans_from_events, trace_json

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/console", tags=["console"])

Caller = Annotated[Principal, Depends(principal)]
Approver = Annotated[Principal, Depends(approver)]
TaskId = Annotated[str, Path(pattern=ID_PATTERN, description="The task's id, e.g. `tsk_...`.")]

_READ_ERRORS = r.errors(401, 404, 413, 422, 503)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Me(_Model):
    """`GET /v1/console/me`: who the token says the caller is (verified by the server)."""

    tenant_id: str
    subject: str
    roles: list[str]


class Source(_Model):
    tool: str
    observation: str


class Fact(_Model):
    """One ledger fact the policy read, and the observation it came from."""

    kind: str = Field(description="`order`, `payment` or `refund`.")
    id: str
    fields: dict[str, str | None]
    source: Source


class OrderContext(_Model):
    """What the order says that policy ignores (written by customers: shown, never followed)."""

    order_id: str
    customer_name: str
    note: str
    source: Source


class AgentFact(_Model):
    """One tool result a declared agent recorded: what its policy's rules and claims read."""

    kind: str = Field(description="`read` or `effect`.")
    tool: str
    args: dict[str, str | None]
    fields: dict[str, str | None] = Field(description="What the system answered, as text.")
    source: Source = Field(description="Which call answered it (`read 2`, `effect 1, answered`).")


class PlannedEffect(_Model):
    """One effect of an agent task's plan, in order."""

    tool: str
    args: dict[str, str | None]
    idempotency_key: str
    status: str = Field(description="`applied`, `proposed` (pending) or `refused`.")
    detail: str


class AgentEvidence(_Model):
    """A declared agent's facts and plan of effects (`console.agent_evidence`)."""

    facts: list[AgentFact]
    plan: list[PlannedEffect]
    max_effects: int | None = None


class Evidence(_Model):
    facts: list[Fact]
    order: OrderContext | None = None
    policy_passages: list[str]
    agent: AgentEvidence | None = Field(None, description="For a declared agent's task.")


class ApprovalCard(Approval):
    """An approval with what an approver needs to decide it."""

    amount: str | None = Field(description="The action's amount with its currency, e.g. `₹2,000`.")
    payment_id: str | None = None
    workflow: str
    task_status: Status
    evidence: Evidence


class ApprovalCards(_Model):
    """`GET /v1/console/approvals`. `server_now` lets the page count time left on the database's
    clock rather than the browser's."""

    server_now: datetime
    approvals: list[ApprovalCard]


class TaskList(_Model):
    tasks: list[Task]


class WorkerChange(_Model):
    from_worker: str
    to_worker: str
    start_ms: float
    end_ms: float
    gap_ms: float
    lease_expired: bool


class ModelTotals(_Model):
    calls: int
    input_tokens: int
    output_tokens: int
    cost_inr: str


class ToolCall(_Model):
    tool: str
    outcome: str | None = None
    error_type: str | None = None
    idempotency_key: str | None = None
    worker: str | None = None
    start_ms: float | None = None
    duration_ms: float | None = None


class Verdict(_Model):
    """The verifier's word on the reply: verified, and how many drafts it sent back."""

    verified: bool | None
    redrafts: int
    reason: str | None = None


class Timeline(_Model):
    """`GET /v1/console/tasks/{task_id}/timeline`."""

    task: Task
    trace: dict[str, Any] = Field(description="`obs.tracing.trace_json`: the seed's trace shape.")
    worker_changes: list[WorkerChange]
    model: ModelTotals
    tools: list[ToolCall]
    reply: str | None = None
    verdict: Verdict
    evidence: Evidence | None = Field(
        None, description="The facts and plan of effects, for a caller with the approver role."
    )


class DeadLetter(_Model):
    task_id: str
    workflow: str
    reason: str
    attempts: int
    at: datetime


class QueueView(_Model):
    """`GET /v1/console/queues`: the caller tenant's queue and what is not in it."""

    tenant_id: str
    queue: str
    depth: int | None = Field(description="Messages waiting in the broker; null if unreadable.")
    oldest_age_s: float | None = None
    held: int = Field(description="Tasks held at the dispatch gate (caps, switches).")
    held_oldest_s: float | None = None
    in_flight: int = Field(description="Steps running now: tasks with a live lease.")
    by_status: dict[str, int] = Field(description="Unfinished tasks by status.")
    dead_letters: list[DeadLetter]


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


@router.get("/me", response_model=Me, summary="The verified caller", responses=r.errors(401, 413))
def me(who: Caller) -> Me:
    return Me(tenant_id=who.tenant_id, subject=who.subject, roles=sorted(who.roles))


@router.get(
    "/approvals",
    response_model=ApprovalCards,
    summary="Approvals of the caller's tenant, with the evidence behind each",
    responses=r.errors(401, 403, 413, 422, 503),
)
def approval_cards(
    request: Request,
    who: Approver,
    status: Annotated[
        ApprovalStatus | None, Query(description="Only approvals in this status.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> ApprovalCards:
    store = state(request).runtime.store
    cards = []
    for view in store.list_approvals(who.tenant_id, status=status, limit=limit):
        try:
            task = store.get(view.task_id, who.tenant_id)
        except RecordNotFound:
            continue  # deleted by retention while we read: nothing to decide on
        base = Approval.from_view(view).model_dump()
        cards.append(
            ApprovalCard(
                **base,
                amount=ev.amount_of(view.args),
                payment_id=str(view.args["payment_id"]) if "payment_id" in view.args else None,
                workflow=task.workflow,
                task_status=task.status,
                evidence=Evidence.model_validate(ev.evidence(task.state)),
            )
        )
    return ApprovalCards(server_now=_utc(store.db_now()), approvals=cards)


@router.get(
    "/tasks",
    response_model=TaskList,
    summary="The caller tenant's tasks, newest first",
    responses=r.errors(401, 413, 422, 503),
)
def list_tasks(
    request: Request,
    who: Caller,
    status: Annotated[Status | None, Query(description="Only tasks in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> TaskList:
    rows = state(request).runtime.store.list_tasks(who.tenant_id, status=status, limit=limit)
    return TaskList(tasks=[Task.from_view(row.view()) for row in rows])


def _verdict(task: Any, events: list[Any]) -> Verdict:
    outcome = task.outcome or {}
    verified = outcome.get("verified")
    reason = outcome.get("reason") if task.status is not Status.COMPLETED else None
    return Verdict(
        verified=verified if isinstance(verified, bool) else None,
        redrafts=sum(1 for e in events if e.type == "redraft"),
        reason=redact_text(str(reason)) if reason else None,
    )


@router.get(
    "/tasks/{task_id}/timeline",
    response_model=Timeline,
    summary="A task's trace as a waterfall, with its worker changes, model and tool calls",
    responses=_READ_ERRORS,
)
def timeline(task_id: TaskId, request: Request, who: Caller) -> Timeline:
    store = state(request).runtime.store
    task = store.get(task_id, who.tenant_id)  # another tenant's: 404
    events = store.events(task_id, who.tenant_id)
    trace = trace_json(spans_from_events(task, events))
    reply = (task.outcome or {}).get("reply")
    return Timeline(
        task=Task.from_view(task.view()),
        trace=trace,
        worker_changes=[WorkerChange(**c) for c in tl.worker_changes(trace)],
        model=ModelTotals(**tl.model_totals(trace)),
        tools=[ToolCall(**t) for t in tl.tool_calls(trace)],
        reply=str(reply) if reply is not None else None,
        verdict=_verdict(task, events),
        # As on the approval cards: the facts behind a decision are an approver's to read.
        evidence=Evidence.model_validate(ev.evidence(task.state))
        if who.has_role(APPROVER)
        else None,
    )


_redis_clients: dict[tuple[str, str | None], Any] = {}


def _broker_queue(
    broker_url: str, queue: str, sentinel_master: str | None = None
) -> tuple[int | None, float | None]:
    """Depth and oldest-message age of one queue on a Redis broker (None, None otherwise)."""
    # Imported here: only a Redis broker has queues to read.
    from agent_jobs.queue.broker_redis import broker_redis, is_redis_broker  # noqa: PLC0415

    if not is_redis_broker(broker_url):
        return None, None
    client = _redis_clients.get((broker_url, sentinel_master))
    if client is None:
        client = broker_redis(broker_url, sentinel_master or "", timeout_s=2)
        _redis_clients[(broker_url, sentinel_master)] = client
    try:
        pipe = client.pipeline(transaction=False)
        pipe.llen(queue)
        pipe.lindex(queue, -1)
        n, oldest = pipe.execute()
    except Exception as exc:
        log.warning("console: the broker could not be read: %s", type(exc).__name__)
        return None, None
    depth = int(n)
    stamp = oldest_enqueued_at(oldest) if depth else None
    age = (
        0.0 if depth == 0 else (max(0.0, datetime.now(UTC).timestamp() - stamp) if stamp else None)
    )
    return depth, age


@router.get(
    "/queues",
    response_model=QueueView,
    summary="The caller tenant's queue: depth, oldest age, held and in-flight steps, dead letters "
    "(role `operator`)",
    responses=r.errors(401, 403, 413, 503),
)
def queues(request: Request, who: Operator) -> QueueView:
    rt = state(request).runtime
    store, cfg = rt.store, rt.settings
    queue = tenant_queue(cfg.queue_prefix, who.tenant_id)
    depth, age = _broker_queue(cfg.broker_url, queue, cfg.sentinel_master)
    held, held_oldest = store.held_ages().get(who.tenant_id, (0, None))
    by_status, in_flight = store.unfinished_counts(who.tenant_id)
    dead = [
        DeadLetter(
            task_id=d.task_id, workflow=d.workflow, reason=d.reason, attempts=d.attempts, at=d.at
        )
        for d in store.dead_letters(who.tenant_id, limit=50)
    ]
    return QueueView(
        tenant_id=who.tenant_id,
        queue=queue,
        depth=depth,
        oldest_age_s=age,
        held=held,
        held_oldest_s=held_oldest,
        in_flight=in_flight,
        by_status=by_status,
        dead_letters=dead,
    )
