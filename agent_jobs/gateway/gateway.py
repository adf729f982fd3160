"""The model gateway: the one place every inference call passes through.

`propose` runs, in this order and never more than once each:

1. budgets, before anything is sent: calls per task, estimated input tokens per call and per
   task (`tokens.estimate_input_tokens`);
2. the primary's circuit breaker, then the primary call within the route's timeouts;
3. on `ModelUnavailable`, the fallback, only if the step type is in its `allowed_for`
   (budgets are unchanged: the failed call returned nothing and is not counted);
4. validation of the output against the schema (and of tool calls against the offered tools);
5. on invalid output, ONE repair call to the same model with the invalid output and the errors
   appended, budgets checked again; still invalid raises `InvalidModelOutput`.

A billed call (one that returned a response) is accounted with the provider's token counts when
it reports them, else with the estimate, and priced with the route's price table. The gateway
keeps no per-task state: usage comes in on the request and goes out as `usage_after` (also on
every error), so a retried or resumed step sees exactly what was spent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypeVar

from jsonschema import SchemaError  # type: ignore[import-untyped]

from agent_jobs.core.clock import Clock, SystemClock
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.gateway.breaker import CircuitBreaker
from agent_jobs.gateway.chat import ParsedOutput, parse_chat_response
from agent_jobs.gateway.contracts import CallRecord, Message, ModelRequest, ModelResult, TaskUsage
from agent_jobs.gateway.costmodel import call_cost
from agent_jobs.gateway.errors import (
    BudgetExceeded,
    GatewayError,
    InvalidModelOutput,
    ModelCapSaturated,
    ModelUnavailable,
    ProviderRejected,
)
from agent_jobs.gateway.providers.base import Provider
from agent_jobs.gateway.routes import ModelTarget, Route
from agent_jobs.gateway.schemas import validation_errors, validator_for
from agent_jobs.gateway.slots import ModelSlots
from agent_jobs.gateway.tokens import estimate_input_tokens, estimate_text_tokens

log = logging.getLogger(__name__)

Slot = Literal["primary", "fallback"]
REPAIR_INSTRUCTION = (
    "Your previous reply was rejected:\n{errors}\n"
    "Answer again with output that satisfies the output schema exactly. Fix only what the "
    "errors name; do not add commentary."
)
_MAX_ECHO_CHARS = 8_000


@dataclass
class _Run:
    """The state of one `propose` call: what has been billed so far."""

    route: Route
    request: ModelRequest
    schema: dict[str, Any]
    usage: TaskUsage
    calls: list[CallRecord] = field(default_factory=list)


def repair_messages(raw: str, errors: list[str]) -> list[Message]:
    """The two messages appended for the repair call: the invalid output, then the errors."""
    return [
        Message(role="assistant", content=raw[:_MAX_ECHO_CHARS] or "(empty reply)"),
        Message(
            role="user",
            content=REPAIR_INSTRUCTION.format(errors="\n".join(f"- {e}" for e in errors)),
        ),
    ]


class ModelGateway:
    """Routes, breakers and providers. Thread-safe: breakers lock; everything else is immutable
    or local to one call."""

    def __init__(
        self,
        routes: Mapping[str, Route] | Iterable[Route],
        providers: Mapping[str, Provider],
        clock: Clock | None = None,
        *,
        model_slots: ModelSlots | None = None,
    ) -> None:
        # The global model-call cap, shared by every worker (None: no cap).
        self._slots = model_slots
        listed = routes.values() if isinstance(routes, Mapping) else routes
        self._routes: dict[str, Route] = {r.key: r for r in listed}
        self._providers = dict(providers)
        self._clock: Clock = clock or SystemClock()
        self._breakers: dict[tuple[str, Slot], CircuitBreaker] = {}
        for route in self._routes.values():
            slots: list[tuple[Slot, ModelTarget | None]] = [
                ("primary", route.primary),
                ("fallback", route.fallback),
            ]
            for slot, target in slots:
                if target is None:
                    continue
                if target.provider not in self._providers:
                    raise ConfigError(
                        f"route {route.key}: {slot} provider {target.provider!r} is not "
                        f"configured (have: {', '.join(sorted(self._providers)) or 'none'})"
                    )
                self._breakers[(route.key, slot)] = CircuitBreaker(
                    route.breaker, self._clock, name=f"{route.key}/{slot}"
                )

    @property
    def routes(self) -> Mapping[str, Route]:
        return dict(self._routes)

    def route(self, route_name: str) -> Route:
        """The route named `name@version` (tasks pin the exact version)."""
        try:
            return self._routes[route_name]
        except KeyError:
            known = ", ".join(sorted(self._routes))
            raise ConfigError(f"unknown model route {route_name!r}; known: {known}") from None

    def breaker(self, route_name: str, slot: Slot = "primary") -> CircuitBreaker:
        """The breaker guarding a route's primary or fallback model (for metrics and tests)."""
        return self._breakers[(self.route(route_name).key, slot)]

    def propose(self, route_name: str, request: ModelRequest) -> ModelResult:
        """Ask the route's model for a proposal; see the module doc for the order of checks.

        Raises `BudgetExceeded`, `ModelUnavailable`, `InvalidModelOutput`, `ProviderRejected`
        (each with `usage_after` and the billed `calls`), `ConfigError` for an unknown route and
        `InvalidInput` for a request whose output or tool schema is not valid JSON Schema.
        """
        route = self.route(route_name)
        schema = (
            route.output.schema_dict if request.output_schema is None else request.output_schema
        )
        _check_schemas(schema, request)
        started = self._clock.monotonic()
        run = _Run(route, request, schema, request.usage)
        try:
            return self._propose(run, started)
        except GatewayError as exc:
            exc.calls = tuple(run.calls)
            raise

    def _propose(self, run: _Run, started: float) -> ModelResult:
        route, request, schema = run.route, run.request, run.schema
        messages = list(request.messages)

        target, slot, parsed = self._first_call(run, messages)
        errors = _output_errors(parsed, request, schema)
        repaired = False
        if errors:
            # Paths only: the messages quote model output, which may carry personal data.
            log.warning(
                "route %s task %s: invalid output at %s, repairing once",
                route.key,
                request.task_id,
                ", ".join(e.split(":", 1)[0] for e in errors),
            )
            messages += repair_messages(parsed.raw, errors)
            parsed = self._call(run, target, slot, messages, "repair")
            errors = _output_errors(parsed, request, schema)
            if errors:
                raise InvalidModelOutput(errors, raw=parsed.raw, usage_after=run.usage)
            repaired = True
        assert parsed.proposal is not None  # no errors means it parsed
        return ModelResult(
            proposal=parsed.proposal,
            route=route.key,
            provider=target.provider,
            model=target.model,
            input_tokens=sum(c.input_tokens for c in run.calls),
            output_tokens=sum(c.output_tokens for c in run.calls),
            cached_input_tokens=sum(c.cached_input_tokens for c in run.calls),
            cost=sum((c.cost for c in run.calls), Decimal(0)),
            latency_ms=_ms(self._clock.monotonic() - started),
            repaired=repaired,
            fallback=slot == "fallback",
            usage_after=run.usage,
            calls=tuple(run.calls),
        )

    def _first_call(
        self, run: _Run, messages: list[Message]
    ) -> tuple[ModelTarget, Slot, ParsedOutput]:
        route = run.route
        try:
            return route.primary, "primary", self._call(run, route.primary, "primary", messages)
        except ModelUnavailable as exc:
            fb = route.fallback
            if fb is None or run.request.step_type not in fb.allowed_for:
                raise
            log.info(
                "route %s task %s: primary unavailable (%s), using fallback %s for %s",
                route.key,
                run.request.task_id,
                exc.reason,
                fb.model,
                run.request.step_type,
            )
            try:
                return fb, "fallback", self._call(run, fb, "fallback", messages)
            except ModelUnavailable as fb_exc:
                # The primary's retry hint wins: it is the model the task should get back to.
                raise ModelUnavailable(
                    exc.reason,
                    f"{exc.detail}; fallback {fb.model} also unavailable ({fb_exc.reason})",
                    retry_after_s=exc.retry_after_s,
                    provider=route.primary.provider,
                    model=route.primary.model,
                    usage_after=run.usage,
                ) from fb_exc

    def _check_budgets(self, run: _Run, estimate: int) -> None:
        b, u, key = run.route.budgets, run.usage, run.route.key
        if u.calls + 1 > b.max_calls_per_task:
            raise BudgetExceeded(
                "max_calls_per_task",
                limit=b.max_calls_per_task,
                requested=u.calls + 1,
                route=key,
                usage_after=u,
            )
        if estimate > b.max_input_tokens_per_call:
            raise BudgetExceeded(
                "max_input_tokens_per_call",
                limit=b.max_input_tokens_per_call,
                requested=estimate,
                route=key,
                usage_after=u,
            )
        if u.input_tokens + estimate > b.max_input_tokens_per_task:
            raise BudgetExceeded(
                "max_input_tokens_per_task",
                limit=b.max_input_tokens_per_task,
                requested=u.input_tokens + estimate,
                route=key,
                usage_after=u,
            )

    def _call(
        self,
        run: _Run,
        target: ModelTarget,
        slot: Slot,
        messages: list[Message],
        purpose: Literal["propose", "repair"] = "propose",
    ) -> ParsedOutput:
        """Budgets, breaker, one provider call, accounting. Returns the parsed output."""
        request = run.request
        estimate = estimate_input_tokens(messages, request.tools, run.schema)
        self._check_budgets(run, estimate)
        breaker = self._breakers[(run.route.key, slot)]
        holder = f"{request.task_id}:{uuid.uuid4().hex}"
        if self._slots is not None and not self._slots.acquire(holder):
            # Saturated: defer the step (held without a worker) rather than fail or spin.
            raise _stamp(
                ModelCapSaturated(f"all {self._slots.limit} model-call slots are in use"),
                target,
                run.usage,
            )
        try:
            return self._call_with_slot(
                run, target, slot, messages, purpose=purpose, estimate=estimate, breaker=breaker
            )
        finally:
            if self._slots is not None:
                self._slots.release(holder)

    def _call_with_slot(
        self,
        run: _Run,
        target: ModelTarget,
        slot: Slot,
        messages: list[Message],
        *,
        purpose: Literal["propose", "repair"],
        estimate: int,
        breaker: CircuitBreaker,
    ) -> ParsedOutput:
        request = run.request
        try:
            permit = breaker.acquire()
        except ModelUnavailable as exc:
            raise _stamp(exc, target, run.usage) from None
        provider = self._providers[target.provider]
        t0 = self._clock.monotonic()
        try:
            response = provider.complete(
                target.model,
                messages,
                request.tools,
                run.schema,
                run.route.timeouts,
                request=request,
            )
            parsed = parse_chat_response(response)
        except ModelUnavailable as exc:
            breaker.record_failure(permit)
            raise _stamp(exc, target, run.usage) from None
        except InvalidModelOutput as exc:
            # The provider answered, with a body that is no chat completion: it is up, and the
            # call counts (it may well have been billed). The repair path decides what next.
            breaker.record_success(permit)
            parsed = ParsedOutput(None, exc.raw, exc.errors)
        except ProviderRejected as exc:
            breaker.record_success(permit)
            raise _stamp(exc, target, run.usage) from None
        except BaseException:
            breaker.record_failure(permit)
            raise
        else:
            breaker.record_success(permit)
        reported = parsed.prompt_tokens is not None and parsed.completion_tokens is not None
        tokens_in = parsed.prompt_tokens if parsed.prompt_tokens is not None else estimate
        tokens_out = (
            parsed.completion_tokens
            if parsed.completion_tokens is not None
            else estimate_text_tokens(parsed.raw)
        )
        record = CallRecord(
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cached_input_tokens=parsed.cached_tokens,
            provider=target.provider,
            model=target.model,
            purpose=purpose,
            fallback=slot == "fallback",
            tokens_reported=reported,
            cost=call_cost(
                tokens_in, tokens_out, parsed.cached_tokens, run.route.price_for(target.model)
            ),
            latency_ms=_ms(self._clock.monotonic() - t0),
        )
        run.calls.append(record)
        run.usage = run.usage.plus(record)
        return parsed


_E = TypeVar("_E", ModelUnavailable, ProviderRejected, ModelCapSaturated)


def _stamp(exc: _E, target: ModelTarget, usage: TaskUsage) -> _E:
    """Fill in what only the gateway knows: which target, and the usage to persist."""
    exc.provider = exc.provider or target.provider
    exc.model = exc.model or target.model
    exc.usage_after = usage
    return exc


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _check_schemas(schema: dict[str, Any], request: ModelRequest) -> None:
    try:
        validator_for(schema)
        for tool in request.tools:
            validator_for(tool.parameters)
    except SchemaError as exc:
        raise InvalidInput(f"request schema is not valid JSON Schema: {exc.message}") from None


def _output_errors(
    parsed: ParsedOutput, request: ModelRequest, schema: dict[str, Any]
) -> list[str]:
    """Why the output is unusable; empty when it is a valid proposal.

    Beyond the schema, tool calls must name an offered tool and their args must satisfy that
    tool's parameter schema: catching it here lets the repair fix it, where the tool executor
    (which checks again) could only refuse.
    """
    if parsed.proposal is None:
        return parsed.errors or ["$: unreadable output"]
    errors = validation_errors(schema, parsed.proposal)
    calls = parsed.proposal.get("calls")
    if errors or parsed.proposal.get("kind") != "tool_calls" or not request.tools:
        return errors
    offered = {t.name: t for t in request.tools}
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, dict):
            continue
        spec = offered.get(str(call.get("tool")))
        if spec is None:
            errors.append(
                f"$.calls[{i}].tool: {call.get('tool')!r} is not an offered tool "
                f"({', '.join(sorted(offered))})"
            )
            continue
        for err in validation_errors(spec.parameters, call.get("args")):
            errors.append(f"$.calls[{i}].args{err[1:]}")
    return errors
