"""`agent_jobs.submit`: the Celery-native way in, for services that already speak Celery.

Send it by name, without importing agent_jobs, to the submit queue (`<prefix>.submit`, `aj.submit`
by default), with the same bearer token the HTTP API takes, preferably in a message header (task
arguments show up in Flower and in task events; headers do not):

    from celery import Celery

    app = Celery(broker="redis://redis:6379/0")
    app.send_task(
        "agent_jobs.submit",
        kwargs={
            "idempotency_key": "req-8472",
            "request": {"workflow": "example@1", "input": {"account": "acc_42",
                                                          "amount_minor": 1500}},
        },
        headers={"authorization": "Bearer <jwt>"},   # or kwargs["token"] = "<jwt>"
        queue="aj.submit",
    )

The rules are the HTTP API's (`api.intake`): tenant and requester from the verified token, the
key required, the same key with the same payload names the existing task, with another payload
creates nothing; admission control applies (an empty bucket makes the message retry after the
bucket's wait, `AGENT_JOBS_SUBMIT_MAX_RETRIES` times). A message that creates nothing is recorded
in `rejected_submissions` with its reason (one row per message id, however often it is
redelivered), counted in `agent_jobs_submissions_rejected_total`, and logged.

The workflow's own input check runs before anything is created: a refused input is recorded
as rejected (`invalid_input`, with the field in the message) and does not consume the key, so a
corrected message with the same key creates the task.

The task returns `{"task_id", "status", "trace_id", "created"}` or
`{"rejected": reason_code, "message"}` (kept only if the sender configured a result backend).
A sender that does not keep results learns its task id with `GET /v1/tasks?idempotency_key=KEY`
(or `AgentJobsClient.get_by_key`) and the same token.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import jwt

from agent_jobs.api.admission import build_admission
from agent_jobs.api.auth import AuthError, Principal, TokenVerifier, bearer_token
from agent_jobs.api.intake import (
    Intake,
    InvalidIdempotencyKey,
    SubmitRateLimited,
    check_key,
    parse_request,
    payload_size,
)
from agent_jobs.core.errors import AgentJobsError, IdempotencyConflict, InvalidInput
from agent_jobs.core.identity import check_tenant_id
from agent_jobs.core.names import rejected_submission_id
from agent_jobs.core.text import clean_text, cut, for_log
from agent_jobs.obs.metrics import PrometheusObserver
from agent_jobs.queue.app import app
from agent_jobs.queue.runtime import Runtime, get_runtime
from agent_jobs.store.store import UNAVAILABLE

log = logging.getLogger(__name__)

SUBMIT_TASK = "agent_jobs.submit"
VIA = "celery"
_metrics = PrometheusObserver()
_cache: dict[int, tuple[Runtime, TokenVerifier, Intake]] = {}


class SubmitRejected(Exception):
    """A submission that creates nothing; `code` is the recorded reason."""

    def __init__(self, code: str, message: str, principal: Principal | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.principal = principal


def _wiring() -> tuple[Runtime, TokenVerifier, Intake]:
    runtime = get_runtime()
    cached = _cache.get(id(runtime))
    if cached is None or cached[0] is not runtime:
        cfg = runtime.settings
        intake = Intake(runtime.orchestrator, runtime.workflows, build_admission(cfg), _metrics)
        cached = (runtime, TokenVerifier(cfg), intake)
        _cache.clear()
        _cache[id(runtime)] = cached
    return cached


def _claimed_tenant(token: str | None, claim: str) -> str | None:
    """What an unverified token says its tenant is: for the record only, never trusted."""
    if not token:
        return None
    try:
        value = jwt.decode(token, options={"verify_signature": False}).get(claim)
        return check_tenant_id(value) if isinstance(value, str) else None
    except Exception:
        return None


def _token(task_request: Any, token_kwarg: str | None) -> str | None:
    header = getattr(task_request, "authorization", None)
    headers = getattr(task_request, "headers", None) or {}
    if header is None and isinstance(headers, dict):
        header = headers.get("authorization")
    from_header = bearer_token(header) if isinstance(header, str) else None
    return from_header or (token_kwarg if isinstance(token_kwarg, str) and token_kwarg else None)


@app.task(name=SUBMIT_TASK, bind=True, acks_late=True, ignore_result=True, max_retries=None)
def submit(
    self: Any,
    request: Any = None,
    idempotency_key: Any = None,
    token: str | None = None,
) -> dict[str, Any]:
    """Create (or find) a task from a Celery message; see the module docstring."""
    runtime, verifier, intake = _wiring()
    # The sender chooses the message id (`send_task(task_id=...)`): it is data like the rest.
    message_id = cut(clean_text(str(getattr(self.request, "id", None) or uuid.uuid4().hex)), 255)
    bearer = _token(self.request, token)
    key_text = idempotency_key if isinstance(idempotency_key, str) else None
    try:
        principal = _verify(verifier, bearer)
        try:
            key = check_key(key_text)
        except InvalidIdempotencyKey as exc:
            raise SubmitRejected("invalid_idempotency_key", str(exc), principal) from None
        if payload_size(request) > runtime.settings.api_max_body_bytes:
            raise SubmitRejected(
                "payload_too_large", "the request is over the size limit", principal
            )
        try:
            task_request = parse_request(request, runtime.workflows)
            result = intake.submit(principal, key, task_request, via=VIA)
        except SubmitRateLimited as exc:
            if self.request.retries < runtime.settings.submit_max_retries:
                raise self.retry(countdown=exc.retry_after_s) from None
            raise SubmitRejected(exc.code, str(exc), principal) from None
        except IdempotencyConflict as exc:
            raise SubmitRejected(exc.code, str(exc), principal) from None
        except InvalidInput as exc:
            where = f" (field {exc.field})" if exc.field and exc.field not in str(exc) else ""
            raise SubmitRejected(exc.code, f"{exc}{where}", principal) from None
        except AgentJobsError as exc:
            raise SubmitRejected(exc.code, str(exc), principal) from None
        except UNAVAILABLE:
            # The database is down: nothing was created; try the message again later.
            if self.request.retries < runtime.settings.submit_max_retries:
                raise self.retry(countdown=min(60, 2**self.request.retries)) from None
            raise
    except SubmitRejected as exc:
        _record(
            runtime,
            exc,
            message_id=message_id,
            bearer=bearer,
            key=key_text,
            tenant_claim=verifier.tenant_claim,
        )
        return {"rejected": exc.code, "message": exc.message}
    task = result.task
    return {
        "task_id": task.id,
        "status": task.status.value,
        "trace_id": task.trace_id,
        "created": result.created,
    }


def _verify(verifier: TokenVerifier, bearer: str | None) -> Principal:
    try:
        return verifier.verify(bearer)
    except AuthError as exc:
        raise SubmitRejected(exc.reason, exc.message) from None


def _record(
    runtime: Runtime,
    exc: SubmitRejected,
    *,
    message_id: str,
    bearer: str | None,
    key: str | None,
    tenant_claim: str,
) -> None:
    who = exc.principal
    _metrics.submission_rejected(VIA, exc.code)
    log.warning(
        "rejected submission %s (%s): %s", for_log(message_id), exc.code, for_log(exc.message)
    )  # never the token
    # The record keeps what was sent (a bad key is the reason to look), cleaned and bounded so
    # that any message, however malformed, can be recorded.
    runtime.store.record_rejected_submission(
        rejected_submission_id(message_id),
        via=VIA,
        reason_code=exc.code,
        reason=cut(clean_text(exc.message), 1000),
        tenant_id=who.tenant_id if who else None,
        subject=who.subject if who else None,
        claimed_tenant=None if who else _claimed_tenant(bearer, tenant_claim),
        idempotency_key=cut(clean_text(key), 255) if key is not None else None,
        message_id=message_id,
    )
