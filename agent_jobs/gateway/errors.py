"""Gateway errors. Each says whether a retry can help and carries what the caller must persist.

The orchestrator decides what happens to the task from the type alone: `BudgetExceeded` stops the
task (FAILED or ESCALATED), `ModelUnavailable` and `InvalidModelOutput` send it to RETRY_WAIT,
`ProviderRejected` is a configuration or request bug that no retry fixes. Calls that returned a
response were billed even when the proposal is unusable, so every error carries `usage_after`:
the task's usage including those calls, to be saved in the task's state before anything else,
and `calls`: the billed calls themselves, for per-call accounting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from agent_jobs.core.errors import AgentJobsError, Deferred
from agent_jobs.core.holds import HoldReason

if TYPE_CHECKING:
    from agent_jobs.gateway.contracts import CallRecord, TaskUsage

BudgetName = Literal["max_calls_per_task", "max_input_tokens_per_call", "max_input_tokens_per_task"]
UnavailableReason = Literal[
    "breaker_open", "rate_limited", "server_error", "timeout", "connection_error"
]


class GatewayError(AgentJobsError):
    """Base of the gateway's errors. `retryable` tells the orchestrator whether to back off."""

    code = "gateway_error"
    retryable = False

    def __init__(self, message: str, *, usage_after: TaskUsage | None = None) -> None:
        super().__init__(message)
        # None only when raised outside the gateway (by a provider); the gateway always fills it.
        self.usage_after = usage_after
        # The billed calls of the failed request (a repair that came back invalid, say), so the
        # caller can record each one as it records a successful request's `ModelResult.calls`.
        self.calls: tuple[CallRecord, ...] = ()


class BudgetExceeded(GatewayError):
    """A call would exceed one of the route's budgets. Never retryable: retrying is the loop
    the budget exists to stop, so the task must end as FAILED or ESCALATED."""

    code = "budget_exceeded"
    retryable = False

    def __init__(
        self,
        budget: BudgetName,
        *,
        limit: int,
        requested: int,
        route: str,
        usage_after: TaskUsage | None = None,
    ) -> None:
        super().__init__(
            f"route {route}: {budget} is {limit}, this call would need {requested}",
            usage_after=usage_after,
        )
        self.budget: BudgetName = budget
        self.limit = limit
        self.requested = requested
        self.route = route


class ModelUnavailable(GatewayError):
    """The model could not answer now: breaker open, 429, 5xx, timeout or connection error.

    `retry_after_s` is the provider's Retry-After (or the breaker's time to its probe) when known;
    None means "use your own backoff".
    """

    code = "model_unavailable"
    retryable = True

    def __init__(
        self,
        reason: UnavailableReason,
        detail: str = "",
        *,
        retry_after_s: float | None = None,
        provider: str = "",
        model: str = "",
        usage_after: TaskUsage | None = None,
    ) -> None:
        where = f"{provider}/{model}" if provider or model else "model"
        hint = f"; retry after {retry_after_s:g} s" if retry_after_s is not None else ""
        text = f"{where} unavailable ({reason}){': ' + detail if detail else ''}{hint}"
        super().__init__(text, usage_after=usage_after)
        self.reason: UnavailableReason = reason
        self.detail = detail
        self.retry_after_s = retry_after_s
        self.provider = provider
        self.model = model


class InvalidModelOutput(GatewayError):
    """The output did not match the schema, and neither did the one repair attempt.

    Retryable (a later call may do better) but bounded by the per-task call budget, which counts
    both calls. `errors` are the validation messages of the last attempt; `raw` a bounded excerpt.
    """

    code = "invalid_model_output"
    retryable = True

    def __init__(
        self,
        errors: list[str],
        *,
        raw: str = "",
        usage_after: TaskUsage | None = None,
    ) -> None:
        shown = "; ".join(errors[:3]) or "unparseable output"
        super().__init__(f"model output is invalid: {shown}", usage_after=usage_after)
        self.errors = list(errors)
        self.raw = raw[:2000]


class ProviderRejected(GatewayError):
    """The provider refused the request (a 4xx other than 408/429): a bad request, a wrong key,
    an unknown model. Not retryable and not a breaker failure: the provider is up, we are wrong."""

    code = "provider_rejected"
    retryable = False

    def __init__(
        self,
        status: int,
        detail: str = "",
        *,
        provider: str = "",
        model: str = "",
        usage_after: TaskUsage | None = None,
    ) -> None:
        super().__init__(
            f"{provider or 'provider'}/{model or '?'} rejected the request with {status}"
            f"{': ' + detail if detail else ''}",
            usage_after=usage_after,
        )
        self.status = status
        self.detail = detail
        self.provider = provider
        self.model = model


class ModelCapSaturated(GatewayError, Deferred):
    """Every model-call slot is taken (the global cap). The step is deferred, not failed: the
    task is held without a worker until a slot frees, and the wait shows as queue age."""

    code = "model_cap_saturated"
    retryable = True
    hold_for = HoldReason.MODEL_CAP.value
    provider = ""
    model = ""
