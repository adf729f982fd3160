"""The business systems of a simulated world, and the record of everything they received.

A `SystemOfRecord` applies an effect at most once per idempotency key (as a payments ledger or
an orders service does), answers lookups by key, and misbehaves as the schedule draws: throttles
(429, nothing applied), refuses (a definitive rejection), is unavailable before applying, times
out before or after applying (the caller cannot tell which), is slow (the caller's lease may
lapse while it waits), and lags (a lookup shortly after an effect does not see it yet). Every
send and lookup is appended to `calls`, which is what the oracle judges: what the business
systems actually received, not what the task rows say.

`Ledger` speaks `example@1`'s backend interface (`workflows/example_backend.py`); `Orders` is an
orders service for the simulated agents (`simulation/agents.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.clock import VirtualClock

# What a send can answer. The first two applied the effect; `timeout_applied` too, but the
# caller was not told. Only these count as a definitive refusal: the key may be sent again.
APPLIED = ("applied", "replayed")
REFUSALS = ("throttled", "rejected", "unavailable")
SEND_FAULTS = {
    "ok": 62,
    "throttled": 8,
    "rejected": 3,
    "unavailable": 4,
    "timeout_applied": 10,
    "timeout_lost": 5,
    "slow": 8,
}
LOOKUP_FAULTS = {"ok": 80, "failed": 12, "slow": 8}


class SystemTimeout(TimeoutError):
    """The system did not answer in time (it may or may not have applied the effect)."""


class SystemRefused(Exception):
    """A definitive refusal before anything was applied: `code` is `throttled`, `rejected` or
    `unavailable`."""

    def __init__(self, code: str, retry_after_s: float | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.retry_after_s = retry_after_s


@dataclass
class Call:
    """One request a system received."""

    seq: int
    at: datetime
    system: str
    kind: str  # "send" or "lookup"
    key: str
    by: str  # the simulated process that sent it
    args: dict[str, Any] = field(default_factory=dict)
    answer: str = ""  # see APPLIED / REFUSALS; lookups: found, not_found, failed


@dataclass
class Applied:
    key: str
    args: dict[str, Any]
    result: dict[str, Any]
    visible_at: datetime


class Hooks:
    """What a system asks of the world it lives in: who is calling, and a moment in the middle
    of a call where the schedule may interleave other work (a sweeper, an approval, a cancel)."""

    def caller(self) -> str:
        return "?"

    def before_send(self) -> None:
        """Just before a request leaves the caller (a worker may die here: it never left)."""

    def received(self, call: Call) -> None:
        """A request arrived (the oracle judges every send here, before it is applied)."""

    def during_call(self, where: str) -> None:
        """Called after the request arrived and again before the answer leaves."""

    def slow_call(self) -> None:
        """The call takes long: the clock moves while the caller waits."""


class SystemOfRecord:
    def __init__(
        self,
        name: str,
        choices: Choices,
        clock: VirtualClock,
        calls: list[Call],
        hooks: Hooks,
        *,
        faults: bool = True,
    ) -> None:
        self.name = name
        self.choices = choices
        self.clock = clock
        self.calls = calls
        self.hooks = hooks
        self.faults = faults
        self.applied: dict[str, Applied] = {}

    def _record(self, kind: str, key: str, args: dict[str, Any]) -> Call:
        call = Call(len(self.calls), self.clock.now(), self.name, kind, key, self.hooks.caller())
        call.args = dict(args)
        self.calls.append(call)
        return call

    def _fault(self, weights: dict[str, int]) -> str:
        return self.choices.weighted(weights) if self.faults else "ok"

    def send(
        self, key: str, args: dict[str, Any], apply: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Apply `apply()` once under `key` (the same key again answers the same result)."""
        self.hooks.before_send()
        call = self._record("send", key, args)
        self.hooks.received(call)
        fault = self._fault(SEND_FAULTS)
        self.hooks.during_call("send arrived")
        if fault == "throttled":
            call.answer = "throttled"
            raise SystemRefused("throttled", retry_after_s=float(1 + self.choices.draw(30)))
        if fault == "rejected" and key in self.applied:
            fault = "ok"  # an idempotent system answers a key it applied with its result
        if fault in ("rejected", "unavailable"):
            call.answer = fault
            raise SystemRefused(fault)
        if fault == "timeout_lost":
            call.answer = "timeout_lost"
            raise SystemTimeout(f"{self.name}: no answer (the request was lost)")
        done = self.applied.get(key)
        if done is None:
            try:
                result = apply()
            except SystemRefused as exc:
                call.answer = exc.code
                raise
            lag = float(self.choices.draw(40)) if self.choices.chance(25) else 0.0
            done = Applied(key, dict(args), result, self.clock.now() + timedelta(seconds=lag))
            self.applied[key] = done
            call.answer = "applied"
        else:
            call.answer = "replayed"
        if fault == "slow":
            self.hooks.slow_call()
        self.hooks.during_call("send applied")
        if fault == "timeout_applied":
            call.answer += "+timeout"
            raise SystemTimeout(f"{self.name}: no answer in time (it had applied the effect)")
        return dict(done.result)

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The effect applied under `key`, or None — once it is visible (lag)."""
        call = self._record("lookup", key, {})
        fault = self._fault(LOOKUP_FAULTS)
        self.hooks.during_call("lookup arrived")
        if fault == "failed":
            call.answer = "failed"
            raise SystemRefused("unavailable")
        if fault == "slow":
            self.hooks.slow_call()
        done = self.applied.get(key)
        if done is None or done.visible_at > self.clock.now():
            call.answer = "not_found"
            return None
        call.answer = "found"
        return dict(done.result)

    def read(self, key: str) -> None:
        """A read of this system: it may fail like a lookup."""
        if self._fault(LOOKUP_FAULTS) == "failed":
            raise SystemRefused("unavailable")


class Ledger:
    """`example@1`'s backend (`ExampleBackend`'s interface) on a simulated system."""

    def __init__(self, system: SystemOfRecord) -> None:
        self.system = system

    def read_account(self, account: str) -> dict[str, Any]:
        from agent_jobs.workflows.example_backend import BackendUnavailable  # noqa: PLC0415

        try:
            self.system.read(account)
        except SystemRefused as exc:
            raise BackendUnavailable(exc.code) from exc
        return {"account": account, "status": "active"}

    def transfer(self, key: str, account: str, amount_minor: int, currency: str) -> Any:
        from agent_jobs.workflows.example_backend import (  # noqa: PLC0415
            BackendRejected,
            BackendThrottled,
            BackendUnavailable,
            Transfer,
        )

        args = {"account": account, "amount_minor": amount_minor, "currency": currency}

        def apply() -> dict[str, Any]:
            number = len(self.system.applied) + 1
            return Transfer(f"tr_{number:04d}", key, account, amount_minor, currency).as_dict()

        try:
            result = self.system.send(key, args, apply)
        except SystemRefused as exc:
            if exc.code == "throttled":
                raise BackendThrottled(exc.retry_after_s or 1.0) from exc
            if exc.code == "unavailable":
                raise BackendUnavailable("ledger unavailable") from exc
            raise BackendRejected("insufficient_funds") from exc
        return Transfer(**result)

    def lookup(self, key: str) -> Any:
        from agent_jobs.workflows.example_backend import (  # noqa: PLC0415
            BackendUnavailable,
            Transfer,
        )

        try:
            found = self.system.lookup(key)
        except SystemRefused as exc:
            raise BackendUnavailable("ledger unavailable") from exc
        return None if found is None else Transfer(**found)
