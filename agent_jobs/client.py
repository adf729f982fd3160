"""`AgentJobsClient`: the HTTP API from Python (`requests`), with typed results and errors.

    client = AgentJobsClient("http://localhost:8000", token)
    created = client.create("example@1", {"account": "acc_42", "amount_minor": 1500})
    task = client.wait(created.task_id, timeout=60)

`create` generates an `Idempotency-Key` when none is given and sends the same key on each of its
own retries (5xx answers and connection errors), so a retry after a lost response finds the task
the first attempt created instead of creating a second one. Reads and cancel are retried the same
way (they are idempotent); grant and deny are not retried (a repeated decision is a 409).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import requests
from pydantic import BaseModel, ValidationError

from agent_jobs.api.models import (
    Approval,
    ApprovalList,
    CancelAccepted,
    Event,
    EventList,
    Task,
    TaskCreated,
)
from agent_jobs.core.states import TERMINAL, Status

M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """An error answer of the API: HTTP status, stable `code`, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class BadRequest(ApiError):
    """400 and 422: the request itself is wrong (including an unknown workflow)."""


class Unauthorized(ApiError):
    """401: the token is missing, expired or not trusted."""


class Forbidden(ApiError):
    """403: the token lacks a role, or the caller may not decide this approval."""


class NotFound(ApiError):
    """404: no such task or approval for this tenant."""


class Conflict(ApiError):
    """409: the task is finished, or the approval is no longer pending."""


class IdempotencyConflict(BadRequest):
    """422 `idempotency_key_reused`: the key was used with a different payload."""


class PayloadTooLarge(ApiError):
    """413."""


class RateLimited(ApiError):
    """429: the tenant's bucket is empty; `retry_after_s` says when to come back."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float) -> None:
        super().__init__(status, code, message)
        self.retry_after_s = retry_after_s


class ServerError(ApiError):
    """5xx after the client's retries."""


class WaitTimeout(TimeoutError):
    """`wait` gave up; `task` is the last state seen."""

    def __init__(self, task: Task, timeout: float) -> None:
        super().__init__(f"task {task.task_id} still {task.display_status} after {timeout} s")
        self.task = task


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: BadRequest,
}
_TRANSIENT = (requests.ConnectionError, requests.Timeout)


def _error(response: requests.Response) -> ApiError:
    try:
        body = response.json()["error"]
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", response.text[:200] or response.reason
    status = response.status_code
    if status == 429:
        try:
            retry_after = float(response.headers.get("Retry-After", "1"))
        except ValueError:
            retry_after = 1.0
        return RateLimited(status, code, message, retry_after)
    if status == 422 and code == "idempotency_key_reused":
        return IdempotencyConflict(status, code, message)
    if status >= 500:
        return ServerError(status, code, message)
    return _BY_STATUS.get(status, ApiError)(status, code, message)


# A long poll's own bound (the API answers within its request deadline, 60 s by default).
LONG_POLL_MAX_S = 50.0


class AgentJobsClient:
    """A client for one tenant's token (the tenant is the token's, never a parameter)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.session = session or requests.Session()
        self._sleep = sleep

    # -- tasks ------------------------------------------------------------------------------

    def create(
        self,
        workflow: str,
        input: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> TaskCreated:
        """Submit a task; a generated key (or the one given) is reused across retries."""
        key = idempotency_key or f"ajc-{uuid.uuid4().hex}"
        response = self._send(
            "POST",
            "/v1/tasks",
            json={"workflow": workflow, "input": input or {}},
            headers={"Idempotency-Key": key},
            retry=True,
        )
        return self._parse(response, TaskCreated)

    def get(self, task_id: str) -> Task:
        """The task: status, `display_status`, pending action (no arguments), outcome."""
        return self._parse(self._send("GET", f"/v1/tasks/{task_id}"), Task)

    def get_by_key(self, idempotency_key: str) -> Task:
        """The token's tenant's task created with `idempotency_key` (`NotFound` if none): how a
        sender that did not keep the answer, e.g. a Celery-native one, learns its task id."""
        response = self._send("GET", "/v1/tasks", params={"idempotency_key": idempotency_key})
        return self._parse(response, Task)

    def events(self, task_id: str, after_seq: int = 0) -> list[Event]:
        """The task's redacted trace, oldest first (only events after `after_seq`)."""
        response = self._send("GET", f"/v1/tasks/{task_id}/events", params={"after_seq": after_seq})
        return self._parse(response, EventList).events

    def cancel(self, task_id: str) -> CancelAccepted:
        """Request cancellation (honoured at the next step boundary); `Conflict` if finished."""
        return self._parse(self._send("POST", f"/v1/tasks/{task_id}/cancel"), CancelAccepted)

    def wait(
        self,
        task_id: str,
        timeout: float,
        *,
        until: Iterable[str] | None = None,
        poll_s: float = 0.2,
        max_poll_s: float = 2.0,
    ) -> Task:
        """Wait until the task is finished (or its `display_status` is one of `until`, e.g.
        `{"awaiting_approval"}`); `WaitTimeout` after `timeout` seconds. Each request is the
        API's long poll (`?wait=`), answered as soon as the status changes; a server without it
        answers at once, and is then polled every `poll_s` to `max_poll_s` seconds."""
        wanted = set(until or ())
        deadline = time.monotonic() + timeout
        task = self.get(task_id)
        delay = poll_s
        while True:
            if task.status in TERMINAL or task.display_status in wanted:
                return task
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(task, timeout)
            seconds = min(left, LONG_POLL_MAX_S)
            asked = time.monotonic()
            before = task.status
            task = self._parse(
                self._send(
                    "GET",
                    f"/v1/tasks/{task_id}",
                    params={"wait": max(0.001, round(seconds, 3))},
                    timeout_s=seconds + self.timeout_s,
                ),
                Task,
            )
            if task.status == before and time.monotonic() - asked < min(seconds, poll_s) / 2:
                self._sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 1.5, max_poll_s)

    # -- approvals ----------------------------------------------------------------------------

    def approvals(
        self, status: str | None = "pending", task_id: str | None = None
    ) -> list[Approval]:
        """Approvals of the token's tenant (the token needs the `approver` role)."""
        params = {k: v for k, v in (("status", status), ("task_id", task_id)) if v is not None}
        response = self._send("GET", "/v1/approvals", params=params)
        return self._parse(response, ApprovalList).approvals

    def grant(self, approval_id: str, note: str = "") -> Approval:
        """Grant a pending approval as the token's subject (never the task's requester)."""
        return self._decide(approval_id, "grant", note)

    def deny(self, approval_id: str, note: str = "") -> Approval:
        """Deny a pending approval; the task re-plans or ends, as its workflow decides."""
        return self._decide(approval_id, "deny", note)

    def _decide(self, approval_id: str, verb: str, note: str) -> Approval:
        # Not retried: a decision that landed and lost its response would be a 409 on repeat.
        response = self._send(
            "POST", f"/v1/approvals/{approval_id}/{verb}", json={"note": note}, retry=False
        )
        return self._parse(response, Approval)

    # -- transport ----------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        retry: bool = True,
        timeout_s: float | None = None,
    ) -> requests.Response:
        all_headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(1, attempts + 1):
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    json=json,
                    params=params,
                    headers=all_headers,
                    timeout=timeout_s or self.timeout_s,
                )
            except _TRANSIENT:
                if attempt == attempts:
                    raise
            else:
                if response.status_code < 500 or attempt == attempts:
                    if response.status_code >= 400:
                        raise _error(response)
                    return response
            self._sleep(self.backoff_s * (2 ** (attempt - 1)))
        raise AssertionError("unreachable")

    @staticmethod
    def _parse(response: requests.Response, model: type[M]) -> M:
        try:
            return model.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise ApiError(response.status_code, "bad_response", str(exc)[:200]) from None


__all__ = [
    "AgentJobsClient",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "IdempotencyConflict",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "ServerError",
    "Status",
    "Unauthorized",
    "WaitTimeout",
]
