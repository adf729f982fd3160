"""Every figure of the seed's cost section, reproduced by the cost model."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agent_jobs.gateway import CallRecord
from agent_jobs.gateway.costmodel import (
    BASELINE_CALLS,
    CACHED_CALLS,
    REDUCED_CALLS,
    SEED_TOOL_TIMINGS,
    active_time_ms,
    call_cost,
    call_latency_ms,
    calls_in_flight,
    cost_per_success,
    cost_report_json,
    price_usage,
    quadratic_input_tokens,
    render_cost_table,
    throughput_at_cap,
)

D = Decimal


def q(value: Decimal, places: str = "0.01") -> Decimal:
    return value.quantize(D(places))


def test_the_baseline_table() -> None:
    report = price_usage(BASELINE_CALLS)
    assert [(r.input_tokens, r.output_tokens) for r in report.rows] == [
        (3_200, 120),
        (4_220, 150),
        (5_570, 180),
        (6_000, 100),
        (6_250, 220),
    ]
    assert [r.latency_ms for r in report.rows] == [1_430, 1_772, 2_147, 1_550, 2_535]
    assert (report.input_tokens, report.output_tokens) == (25_240, 770)
    assert report.latency_ms == 9_434
    assert report.cost == D("5.664")
    assert report.final_prompt_tokens == 6_250
    assert q(report.amplification) == D("4.04")


def test_the_cost_splits_into_input_and_output() -> None:
    assert call_cost(25_240, 0) == D("5.048")
    assert call_cost(0, 770) == D("0.616")
    assert call_latency_ms(3_200, 120) == 150 + 320 + 960


def test_without_the_verification_call() -> None:
    report = price_usage(REDUCED_CALLS)
    assert [r.input_tokens for r in report.rows] == [3_200, 4_220, 5_570, 6_150]
    assert report.rows[-1].latency_ms == 150 + 615 + 1_760 == 2_525
    assert (report.input_tokens, report.output_tokens) == (19_140, 670)
    assert call_cost(19_140, 0) == D("3.828") and call_cost(0, 670) == D("0.536")
    assert report.cost == D("4.364")
    assert report.latency_ms == 7_874


def test_with_the_cached_prefix() -> None:
    report = price_usage(CACHED_CALLS)
    assert report.cached_input_tokens == 12_000
    assert report.cost == D("2.564")
    assert price_usage(REDUCED_CALLS).cost - report.cost == D("1.80")


def test_end_to_end_active_time() -> None:
    assert SEED_TOOL_TIMINGS.tool_ms == 300 + 450 + 40 + 600 + 200 == 1_590
    baseline = active_time_ms(price_usage(BASELINE_CALLS).latency_ms)
    reduced = active_time_ms(price_usage(REDUCED_CALLS).latency_ms)
    assert (baseline, reduced) == (D(11_084), D(9_524))
    assert baseline - reduced == 1_560
    assert q(D(9_434) / baseline) == D("0.85")
    # Serial reads would cost 120 + 300 instead of max(120, 300).
    assert (
        sum(SEED_TOOL_TIMINGS.parallel_reads_ms) - max(SEED_TOOL_TIMINGS.parallel_reads_ms) == 120
    )


def test_littles_law_at_a_cap_of_40() -> None:
    assert q(throughput_at_cap(40, D(9_434))) == D("4.24")
    assert q(throughput_at_cap(40, D(7_874))) == D("5.08")
    assert round(calls_in_flight(D(5), D(9_434))) == 47


def test_quadratic_growth_of_billed_input() -> None:
    assert quadratic_input_tokens(1) == 3_200
    assert quadratic_input_tokens(5) == 24_000
    assert quadratic_input_tokens(10) == 68_000
    assert q(D(quadratic_input_tokens(10)) / quadratic_input_tokens(5)) == D("2.83")


def test_cost_per_verified_task() -> None:
    assert q(cost_per_success(D("5.664"))) == D("6.29")
    assert q(cost_per_success(D("2.564"))) == D("2.85")


def test_price_usage_prices_recorded_calls() -> None:
    calls = [
        CallRecord(
            input_tokens=1_000,
            output_tokens=100,
            provider="openai",
            model="model-x-2026-03",
            cost=D("99"),
            latency_ms=5,
        )
    ]
    report = price_usage(calls)
    assert report.cost == D("0.28")  # the toy formula, not what was recorded
    assert report.latency_ms == 150 + 100 + 800
    assert price_usage([]).cost == 0 and price_usage([]).amplification == 0


def test_cached_tokens_cannot_exceed_input() -> None:
    with pytest.raises(ValueError):
        call_cost(10, 0, 11)


def test_report_json_has_every_figure() -> None:
    data = json.loads(json.dumps(cost_report_json()))
    assert data["baseline"]["cost_inr"] == "5.664"
    assert data["baseline"]["model_latency_ms"] == "9434.0"
    assert data["baseline"]["amplification"] == "4.04"
    assert data["baseline"]["active_time_ms"] == "11084.0"
    assert data["baseline"]["throughput_at_cap_per_s"] == "4.24"
    assert data["reduced"]["cost_inr"] == "4.364"
    assert data["reduced"]["active_time_ms"] == "9524.0"
    assert data["reduced"]["throughput_at_cap_per_s"] == "5.08"
    assert data["reduced_cached"]["cost_inr"] == "2.564"
    assert data["reduced_cached"]["cost_per_verified_task_inr"] == "2.85"
    assert data["baseline"]["calls"][3]["cost_inr"] == "1.280"
    assert data["quadratic_input_tokens"]["5"] == 24_000
    assert data["quadratic_input_tokens"]["10"] == 68_000


def test_rendered_table_is_fixed_width_and_complete() -> None:
    text = render_cost_table()
    for figure in (
        "25,240",
        "770",
        "9,434",
        "5.664",
        "4.04x",
        "11,084",
        "9,524",
        "4.364",
        "7,874",
        "2.564",
        "4.24",
        "5.08",
        "24,000",
        "68,000",
    ):
        assert figure in text, figure
    lines = text.splitlines()
    table = lines[1:8]  # header, five calls, sum
    assert len({len(line) for line in table}) == 1
