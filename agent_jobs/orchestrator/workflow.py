"""The `Workflow` interface: the hooks a workflow implements, and what each may return.

A workflow never writes status. Its hooks return decisions; the orchestrator maps them onto the
transition table and commits them with compare-and-set. Hooks take one frozen input, so adding
a field breaks no workflow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agent_jobs.core.contracts import Action


@dataclass(frozen=True)
class Resumed:
    """Why the task is back in RUNNING: the last thing the orchestrator recorded for the
    workflow's next decision. `kind` is one of `RESUME_KINDS`; `reason` and `code` carry what
    the orchestrator learned (a policy's reason, a system's rejection code); `detail` the rest
    (action identity, approval id, approver)."""

    kind: str
    reason: str = ""
    code: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)


# What `Resumed.kind` may say (the orchestrator writes no other).
RESUME_KINDS = frozenset(
    {
        "policy_denied",  # the proposal was denied by policy
        "approval_denied",  # a person denied it
        "approval_expired",  # nobody decided in time
        "approval_invalid",  # the grant failed revalidation at use (`reason` says which check)
        "approval_expired_before_retry",  # an unknown effect's grant lapsed before the retry
        "effect_rejected",  # the system of record refused the effect (`code`)
        "effect_committed",  # the effect happened (after_effect chose to continue)
        "redraft",  # the verifier sent the draft back (`reason`)
    }
)


@dataclass(frozen=True)
class EffectDecision:
    """The decision an effect rests on, as the orchestrator recorded it with the intent: given
    to `execute` (as `StepInput.decision`) so that the call can carry it to the tool executor
    (`tools.PolicyStamp`), which refuses a write whose arguments no longer hash to
    `action_hash`. `approval_id` names the grant consumed with the intent (None: policy
    allowed it without a person)."""

    action_hash: str
    policy_version: str
    approval_id: str | None = None

    @property
    def kind(self) -> Literal["allow", "approved"]:
        return "approved" if self.approval_id else "allow"


@dataclass(frozen=True)
class StepInput:
    """Everything a hook may read about the task. `state` is a copy: return a new one."""

    task_id: str
    tenant_id: str
    workflow: str
    requester: str
    idempotency_key: str
    input: dict[str, Any]
    state: dict[str, Any]
    pinned: dict[str, Any]
    attempts: int
    trace_id: str
    cancel_requested: bool
    # Append a non-transition event to the task's trace (tool audit records, model calls).
    emit: Callable[[str, dict[str, Any]], None] = field(compare=False, repr=False)
    # Why the task is back in RUNNING (None on its first decision): read this, not the
    # orchestrator's own bookkeeping in `state["runtime"]`.
    resumed: Resumed | None = None
    # Set for `execute` only: the policy decision (and grant) the effect rests on.
    decision: EffectDecision | None = None


# -- decide (RUNNING) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Observe:
    """A read step: new facts recorded, stay RUNNING and decide again."""

    state: dict[str, Any]
    note: str = "observed"


@dataclass(frozen=True)
class Act:
    """Propose one side-effecting action. Policy (`authorize`) decides what happens to it.

    `plan`: the actions the workflow will propose next, in order, once this one is applied.
    When any of them (or this one) needs a person, one approval asks for them all together
    (each its own grant, bound to its own hash, used once at its turn); each is still its own
    `Act` later, authorized again then."""

    action: Action
    state: dict[str, Any]
    plan: tuple[Action, ...] = ()


@dataclass(frozen=True)
class ToVerify:
    """A draft or result is ready for the verifier."""

    state: dict[str, Any]


@dataclass(frozen=True)
class Retry:
    """A transient failure: park in RETRY_WAIT with backoff (dead letter after the last attempt)."""

    reason: str
    state: dict[str, Any] | None = None
    retry_after_s: float | None = None


@dataclass(frozen=True)
class Escalate:
    reason: str
    state: dict[str, Any] | None = None


@dataclass(frozen=True)
class Fail:
    reason: str
    state: dict[str, Any] | None = None


StepDecision = Observe | Act | ToVerify | Retry | Escalate | Fail


# -- authorize -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Authorization:
    kind: Literal["allow", "deny", "needs_approval"]
    policy_version: str
    reason: str = ""
    ttl_s: float = 1800.0


# -- execute / reconcile -------------------------------------------------------------------------


@dataclass(frozen=True)
class EffectApplied:
    result: dict[str, Any]


@dataclass(frozen=True)
class EffectRejected:
    """The system of record said no: it did not apply the request."""

    code: str
    message: str = ""


@dataclass(frozen=True)
class EffectUnknown:
    """It may or may not have applied the request (timeout, connection lost, 5xx after send)."""

    reason: str


@dataclass(frozen=True)
class EffectThrottled:
    """The system of record refused the call *before applying it* because of load (HTTP 429, or
    503 with `Retry-After`): nothing happened, try again after `retry_after_s` with the same key.

    Not an unknown outcome and not a send of the key: the orchestrator parks the task (holding
    nothing), keeps the pending action and its consumed approval, and retries after the delay,
    up to `throttle_max_wait_s` in total, then escalates with the reason."""

    retry_after_s: float | None
    reason: str = "throttled"
    # Held back by an operator's switch (effects stopped ...), not the provider: the task waits
    # as long as the switch is on, and the wait does not count toward `throttle_max_wait_s`.
    by_operator: bool = False


EffectOutcome = EffectApplied | EffectRejected | EffectUnknown | EffectThrottled


@dataclass(frozen=True)
class Found:
    result: dict[str, Any]


@dataclass(frozen=True)
class NoEffect:
    pass


@dataclass(frozen=True)
class Different:
    """An effect exists under the key but does not match the intent."""

    detail: str


@dataclass(frozen=True)
class LookupFailed:
    reason: str


ReconcileResult = Found | NoEffect | Different | LookupFailed


@dataclass(frozen=True)
class AfterEffect:
    """What a committed effect means for the task: the new state, and verify now or continue."""

    state: dict[str, Any]
    verify: bool = True


# -- verify --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Complete:
    outcome: dict[str, Any]
    state: dict[str, Any] | None = None


@dataclass(frozen=True)
class Redraft:
    reason: str
    state: dict[str, Any]


Verdict = Complete | Redraft | Escalate


class Workflow(Protocol):
    """A workflow is code: its decision points, its policy, its effects and its verifier."""

    name: str
    version: int

    def pinned(self) -> dict[str, Any]:
        """Versions a task is pinned to when it is created (prompt, model route, tool schemas)."""
        ...

    def start(self, inp: StepInput) -> dict[str, Any]:
        """Validate the input and return the initial state. Raise `InvalidInput` to fail."""
        ...

    def decide(self, inp: StepInput) -> StepDecision:
        """RUNNING: read, propose an action, hand a draft to the verifier, retry, or stop."""
        ...

    def authorize(self, inp: StepInput, action: Action) -> Authorization:
        """Policy, evaluated at decision time and again when a task resumes after approval."""
        ...

    def execute(self, inp: StepInput, action: Action) -> EffectOutcome:
        """Perform the side effect with `action.idempotency_key`. Never retry inside.
        `inp.decision` holds the policy decision and grant it rests on."""
        ...

    def reconcile(self, inp: StepInput, action: Action) -> ReconcileResult:
        """Look the effect up in the system of record by its idempotency key."""
        ...

    def after_effect(self, inp: StepInput, action: Action, result: dict[str, Any]) -> AfterEffect:
        """Absorb a committed effect's result (from the call or from reconciliation)."""
        ...

    def verify(self, inp: StepInput) -> Verdict:
        """VERIFYING: check the claims against verified facts."""
        ...


class InputCheck(Protocol):
    """Optional hook. Validate a submission's input against the workflow's own schema *before*
    the task is created, so that a typo is refused at submit (HTTP 422 with the field, nothing
    created, the idempotency key not consumed) instead of failing in a worker later. Raise
    `InvalidInput` with a message that names the field; return None when the input is valid.
    `start` still validates too (a task created by an older release may reach a newer worker)."""

    def check_input(self, input: dict[str, Any]) -> None: ...


class QuickSteps(Protocol):
    """Optional hook. A workflow whose `start`, `decide` and `verify` do no I/O for a task (no
    model, no tool, no sleep) returns True, and its steps then run in one database transaction,
    fenced by compare-and-set alone, without a lease: about half the database work per
    transition. If such a step proposes an effect anyway, it is rolled back and re-run under a
    lease."""

    def quick(self, inp: StepInput) -> bool: ...
