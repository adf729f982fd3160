"""The seed's toy cost and latency model, as pure functions over `Decimal`.

    latency per call = 150 ms + 0.1 ms per input token + 8 ms per output token
    cost per call    = input x 0.20 + output x 0.80 (+ cached input x 0.05), INR per 1K tokens

The prices are invented units, not any provider's. The point of the model is the shape: every
call re-sends the accumulated context, so billed input grows roughly with the square of the number
of calls, and removing a call is worth more than any per-call saving. `price_usage` prices a real
task's recorded calls with the same formula, so a trace can be compared with the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_jobs.gateway.contracts import CallRecord

_THOUSAND = Decimal(1000)
CENTS = Decimal("0.01")
PAISA_TENTH = Decimal("0.001")


class Price(BaseModel):
    """INR per 1,000 tokens. Cached input defaults to the full input price."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_1k: Decimal = Field(ge=0)
    output_per_1k: Decimal = Field(ge=0)
    cached_input_per_1k: Decimal | None = Field(default=None, ge=0)

    @property
    def cached_rate(self) -> Decimal:
        return self.input_per_1k if self.cached_input_per_1k is None else self.cached_input_per_1k


@dataclass(frozen=True)
class LatencyModel:
    """Milliseconds per call: fixed + per input token + per output token."""

    fixed_ms: Decimal = Decimal(150)
    per_input_token_ms: Decimal = Decimal("0.1")
    per_output_token_ms: Decimal = Decimal(8)


SEED_PRICE = Price(
    input_per_1k=Decimal("0.20"),
    output_per_1k=Decimal("0.80"),
    cached_input_per_1k=Decimal("0.05"),
)
SEED_LATENCY = LatencyModel()


def call_cost(
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int = 0,
    price: Price = SEED_PRICE,
) -> Decimal:
    """INR for one call. `cached_input_tokens` is the part of `input_tokens` served from cache."""
    if not 0 <= cached_input_tokens <= input_tokens:
        raise ValueError("cached input tokens must be between 0 and the input tokens")
    fresh = input_tokens - cached_input_tokens
    return (
        fresh * price.input_per_1k
        + cached_input_tokens * price.cached_rate
        + output_tokens * price.output_per_1k
    ) / _THOUSAND


def call_latency_ms(
    input_tokens: int, output_tokens: int, latency: LatencyModel = SEED_LATENCY
) -> Decimal:
    """Modelled milliseconds for one call."""
    return (
        latency.fixed_ms
        + input_tokens * latency.per_input_token_ms
        + output_tokens * latency.per_output_token_ms
    )


@dataclass(frozen=True)
class CostRow:
    call: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    latency_ms: Decimal
    cost: Decimal


@dataclass(frozen=True)
class CostReport:
    """Per-call rows and totals. `amplification` is billed input over the final prompt's size."""

    rows: tuple[CostRow, ...]
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    latency_ms: Decimal
    cost: Decimal
    final_prompt_tokens: int
    amplification: Decimal

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": [
                {
                    "call": r.call,
                    "input_tokens": r.input_tokens,
                    "output_tokens": r.output_tokens,
                    "cached_input_tokens": r.cached_input_tokens,
                    "latency_ms": _dec(r.latency_ms, 1),
                    "cost_inr": _dec(r.cost),
                }
                for r in self.rows
            ],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "model_latency_ms": _dec(self.latency_ms, 1),
            "cost_inr": _dec(self.cost),
            "final_prompt_tokens": self.final_prompt_tokens,
            "amplification": str(self.amplification.quantize(CENTS)),
        }


def _dec(value: Decimal, places: int = 3) -> str:
    """At least `places` decimals, more only when exactness needs them: "1.280", "0.0002"."""
    step = Decimal(1).scaleb(-places)
    return str(value.quantize(step)) if value == value.quantize(step) else str(value)


def price_usage(
    calls: Sequence[CallRecord],
    price: Price = SEED_PRICE,
    latency: LatencyModel = SEED_LATENCY,
) -> CostReport:
    """Price recorded calls (a real task's, or a plan's) with the toy formula."""
    rows = tuple(
        CostRow(
            call=i,
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            cached_input_tokens=c.cached_input_tokens,
            latency_ms=call_latency_ms(c.input_tokens, c.output_tokens, latency),
            cost=call_cost(c.input_tokens, c.output_tokens, c.cached_input_tokens, price),
        )
        for i, c in enumerate(calls, start=1)
    )
    total_in = sum(r.input_tokens for r in rows)
    final = rows[-1].input_tokens if rows else 0
    return CostReport(
        rows=rows,
        input_tokens=total_in,
        output_tokens=sum(r.output_tokens for r in rows),
        cached_input_tokens=sum(r.cached_input_tokens for r in rows),
        latency_ms=sum((r.latency_ms for r in rows), Decimal(0)),
        cost=sum((r.cost for r in rows), Decimal(0)),
        final_prompt_tokens=final,
        amplification=Decimal(total_in) / Decimal(final) if final else Decimal(0),
    )


def growing_context(
    first_input: int,
    outputs: Sequence[int],
    observations: Sequence[int],
    cached_prefix: int = 0,
) -> tuple[CallRecord, ...]:
    """Calls whose prompt re-sends everything: input[i] = input[i-1] + output[i-1] + obs[i-1].

    `observations[i]` is what the workflow adds after call i+1 (tool results), so there is one
    observation fewer than there are calls.
    """
    if len(observations) != len(outputs) - 1:
        raise ValueError("need exactly one observation between consecutive calls")
    calls, size = [], first_input
    for i, out in enumerate(outputs):
        calls.append(
            CallRecord(input_tokens=size, output_tokens=out, cached_input_tokens=cached_prefix)
        )
        if i < len(observations):
            size += out + observations[i]
    return tuple(calls)


# The refund task of the seed. Static prefix 3,000 (system prompt, tool schemas, output schema)
# + task text 200; observations: orders 400 + payments 500, policy passages 1,200, refund result
# 250, verification 150.
STATIC_PREFIX_TOKENS = 3_000
FIRST_PROMPT_TOKENS = STATIC_PREFIX_TOKENS + 200
BASELINE_CALLS = growing_context(
    FIRST_PROMPT_TOKENS, outputs=(120, 150, 180, 100, 220), observations=(900, 1_200, 250, 150)
)
# Call 4 only asked the model to request the verification lookup the workflow always performs;
# as a deterministic step, its result (150) joins the refund result before the final call.
REDUCED_CALLS = growing_context(
    FIRST_PROMPT_TOKENS, outputs=(120, 150, 180, 220), observations=(900, 1_200, 250 + 150)
)
# The reduced flow with the static prefix served from the provider's prompt cache at 25%.
CACHED_CALLS = growing_context(
    FIRST_PROMPT_TOKENS,
    outputs=(120, 150, 180, 220),
    observations=(900, 1_200, 400),
    cached_prefix=STATIC_PREFIX_TOKENS,
)


@dataclass(frozen=True)
class ToolTimings:
    """Non-model time of one refund task (ms). The two reads run in parallel."""

    ingress_ms: int = 60
    parallel_reads_ms: tuple[int, ...] = (120, 300)
    retrieval_ms: int = 450
    policy_ms: int = 40
    refund_ms: int = 600
    verification_ms: int = 200

    @property
    def tool_ms(self) -> int:
        return (
            max(self.parallel_reads_ms)
            + self.retrieval_ms
            + self.policy_ms
            + self.refund_ms
            + self.verification_ms
        )


SEED_TOOL_TIMINGS = ToolTimings()


def active_time_ms(model_ms: Decimal, timings: ToolTimings = SEED_TOOL_TIMINGS) -> Decimal:
    """End-to-end active time: ingress + model calls + tools (approval wait excluded)."""
    return timings.ingress_ms + model_ms + timings.tool_ms


def throughput_at_cap(cap: int, model_ms: Decimal) -> Decimal:
    """Little's law: tasks/s sustainable when at most `cap` model calls are in flight."""
    return Decimal(cap) / (model_ms / _THOUSAND)


def calls_in_flight(arrival_per_s: Decimal, model_ms: Decimal) -> Decimal:
    """Little's law: average model calls in flight = arrival rate x time inside model calls."""
    return arrival_per_s * model_ms / _THOUSAND


def quadratic_input_tokens(n_calls: int, base: int = 3_200, per_step: int = 800) -> int:
    """Billed input for N calls, each step adding `per_step`: N*base + per_step*N(N-1)/2."""
    return n_calls * base + per_step * n_calls * (n_calls - 1) // 2


def cost_per_success(cost: Decimal, success_rate: Decimal = Decimal("0.90")) -> Decimal:
    """Cost per verified task when failed tasks cost as much as successful ones."""
    return cost / success_rate


def cost_report_json(
    cap: int = 40, arrival_per_s: Decimal = Decimal(5), success_rate: Decimal = Decimal("0.90")
) -> dict[str, Any]:
    """Every figure of the seed's cost section, as JSON-ready values (Decimals as strings)."""
    designs = {
        "baseline": price_usage(BASELINE_CALLS),
        "reduced": price_usage(REDUCED_CALLS),
        "reduced_cached": price_usage(CACHED_CALLS),
    }
    out: dict[str, Any] = {"assumptions": _assumptions()}
    for name, report in designs.items():
        active = active_time_ms(report.latency_ms)
        out[name] = {
            **report.to_json(),
            "active_time_ms": _dec(active, 1),
            "model_share_of_active": str((report.latency_ms / active).quantize(CENTS)),
            "throughput_at_cap_per_s": str(
                throughput_at_cap(cap, report.latency_ms).quantize(CENTS)
            ),
            "calls_in_flight_at_arrival_rate": str(
                calls_in_flight(arrival_per_s, report.latency_ms).quantize(CENTS)
            ),
            "cost_per_verified_task_inr": str(
                cost_per_success(report.cost, success_rate).quantize(CENTS)
            ),
        }
    out["little"] = {"cap": cap, "arrival_per_s": str(arrival_per_s)}
    out["quadratic_input_tokens"] = {str(n): quadratic_input_tokens(n) for n in (1, 5, 8, 10)}
    return out


def _assumptions() -> dict[str, str]:
    return {
        "latency": "150 ms + 0.1 ms per input token + 8 ms per output token",
        "prices": "INR 0.20 / 0.80 per 1K input / output tokens; cached input 0.05",
        "tools_ms": str(SEED_TOOL_TIMINGS.tool_ms),
        "ingress_ms": str(SEED_TOOL_TIMINGS.ingress_ms),
    }


def _inr(value: Decimal) -> str:
    return f"{value.quantize(PAISA_TENTH):,}"


def render_cost_table(cap: int = 40) -> str:
    """The seed's table and the design comparison as fixed-width text."""
    base = price_usage(BASELINE_CALLS)
    lines = [
        "Baseline refund task (toy prices, INR per 1K tokens: 0.20 in, 0.80 out)",
        f"{'call':>4}  {'input':>7}  {'output':>6}  {'latency ms':>10}  {'cost INR':>9}",
    ]
    lines += [
        f"{r.call:>4}  {r.input_tokens:>7,}  {r.output_tokens:>6,}  "
        f"{r.latency_ms:>10,.0f}  {_inr(r.cost):>9}"
        for r in base.rows
    ]
    lines.append(
        f"{'sum':>4}  {base.input_tokens:>7,}  {base.output_tokens:>6,}  "
        f"{base.latency_ms:>10,.0f}  {_inr(base.cost):>9}"
    )
    lines.append(
        f"amplification: {base.input_tokens:,} / {base.final_prompt_tokens:,} = "
        f"{base.amplification.quantize(CENTS)}x"
    )
    lines += [
        "",
        f"{'design':<26}{'calls':>5}  {'model ms':>8}  {'active ms':>9}  "
        f"{'INR':>6}  {'tasks/s @' + str(cap):>10}",
    ]
    for name, calls in (
        ("baseline", BASELINE_CALLS),
        ("no verification call", REDUCED_CALLS),
        ("+ cached 3,000 prefix", CACHED_CALLS),
    ):
        rep = price_usage(calls)
        lines.append(
            f"{name:<26}{len(rep.rows):>5}  {rep.latency_ms:>8,.0f}  "
            f"{active_time_ms(rep.latency_ms):>9,.0f}  {_inr(rep.cost):>6}  "
            f"{throughput_at_cap(cap, rep.latency_ms).quantize(CENTS):>10}"
        )
    lines += ["", "input tokens for N calls = N x 3,200 + 800 x N(N-1)/2"]
    lines.append("  ".join(f"N={n}: {quadratic_input_tokens(n):,}" for n in (1, 5, 8, 10)))
    return "\n".join(lines) + "\n"
