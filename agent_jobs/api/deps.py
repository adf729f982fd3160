"""What every request handler needs: the per-app state and the verified caller."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agent_jobs.api.auth import APPROVER, AuthError, Principal, TokenVerifier
from agent_jobs.api.errors import HttpError, unauthorized
from agent_jobs.api.intake import Intake
from agent_jobs.config import Settings
from agent_jobs.core.contracts import ApprovalView
from agent_jobs.obs.metrics import PrometheusObserver
from agent_jobs.store import CancelResult, CreateResult, Store


class ApiOrchestrator(Protocol):
    """The orchestrator entry points the API uses (`orchestrator.runner.Orchestrator`)."""

    def submit(
        self,
        tenant_id: str,
        idempotency_key: str,
        request: Any,
        *,
        requester: str,
        via: str = "python",
    ) -> CreateResult: ...

    def cancel(self, task_id: str, tenant_id: str | None = None) -> CancelResult: ...

    def decide_approval(
        self,
        approval_id: str,
        approver: str,
        *,
        grant: bool,
        tenant_id: str | None = None,
        note: str = "",
    ) -> ApprovalView: ...


class ApiRuntime(Protocol):
    """What the API needs of `queue.runtime.Runtime` (tests pass a lighter object)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def orchestrator(self) -> ApiOrchestrator: ...

    @property
    def workflows(self) -> Any: ...


@dataclass
class ApiState:
    """Everything the handlers share, built once by `create_app`."""

    runtime: ApiRuntime
    verifier: TokenVerifier
    intake: Intake
    metrics: PrometheusObserver
    registry: Any  # the prometheus registry the metrics port serves
    broker_ping: Any  # () -> None, raises when the broker is unreachable
    # () -> None when the database schema is at head, else one line saying where it is; None
    # when the store has no engine to ask (a test double).
    schema_check: Callable[[], str | None] | None = None
    # The dependencies (`database`, `broker`) last found unreachable: readiness logs a change
    # of state, not every probe of a state already reported.
    down: set[str] = field(default_factory=set)


# auto_error=False: a missing or non-bearer header is our 401 with our error body, not FastAPI's.
_bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="JWT",
    description="A JWT naming the tenant (`tenant` claim), the subject (`sub`) and roles "
    "(`roles`); `exp`, `aud` and `iss` are required.",
)


def state(request: Request) -> ApiState:
    """The app's `ApiState`."""
    value = request.app.state.api
    assert isinstance(value, ApiState)
    return value


def principal(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
) -> Principal:
    """The verified caller; 401 for anything else. The tenant is the token's, never the body's."""
    st = state(request)
    token = credentials.credentials if credentials is not None else None
    try:
        return st.verifier.verify(token)
    except AuthError as exc:
        st.metrics.auth_failed(exc.reason)
        raise unauthorized(exc.message) from None


def approver(who: Principal = Depends(principal)) -> Principal:  # noqa: B008
    """The verified caller, who must hold the `approver` role (403 otherwise)."""
    if not who.has_role(APPROVER):
        raise HttpError(403, "forbidden", f"the {APPROVER!r} role is required")
    return who
