"""Route configuration: loading, defaults, and the pinned-model rule."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.errors import ConfigError
from agent_jobs.gateway.costmodel import SEED_PRICE
from agent_jobs.gateway.routes import (
    DEFAULT_ROUTE,
    DEFAULT_ROUTE_CONFIG,
    check_pinned_model,
    load_routes,
    load_routes_file,
)
from agent_jobs.gateway.schemas import PROPOSAL_V3


def config(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(DEFAULT_ROUTE_CONFIG)
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "model",
    [
        "model-x-2026-03",
        "scripted-refund-2026-03",
        "gpt-4o-2024-08-06",
        "claude-3-5-sonnet-20241022",
        "gpt-3.5-turbo-0125",
        "mistral-large-2407",
        "llama3@sha256:0123456789abcdef",
    ],
)
def test_pinned_model_ids_are_accepted(model: str) -> None:
    assert check_pinned_model(model) == model


@pytest.mark.parametrize(
    ("model", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("latest", "latest"),
        ("gpt-4o-latest", "latest"),
        ("model-xlatest", "latest"),
        ("Model-X-LATEST", "latest"),
        ("model-x:latest", "latest"),
        ("model-x-stable-2026-03", "alias"),
        ("model-default-2026-03", "alias"),
        ("gpt-4o", "not pinned"),
        ("claude-3-5-sonnet", "not pinned"),
        ("model-x", "not pinned"),
        ("model x 2026-03", "characters"),
    ],
)
def test_unpinned_model_ids_are_rejected(model: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_pinned_model(model)


def test_default_route_is_the_seeds() -> None:
    r = DEFAULT_ROUTE
    assert r.key == "support-tier2@2026-03"
    assert r.primary.provider == "scripted"
    assert r.primary.model == "scripted-refund-2026-03"
    assert r.fallback is not None
    assert r.fallback.allowed_for == {"summarize", "draft_reply"}
    assert (
        r.budgets.max_calls_per_task,
        r.budgets.max_input_tokens_per_call,
        r.budgets.max_input_tokens_per_task,
    ) == (8, 12_000, 60_000)
    assert (r.breaker.open_after_failures, r.breaker.window_s, r.breaker.half_open_after_s) == (
        5,
        30,
        20,
    )
    assert r.output.schema_dict == PROPOSAL_V3
    assert r.output.on_invalid == "repair_once_then_fail"
    price = r.price_for(r.primary.model)
    assert price == SEED_PRICE
    assert (price.input_per_1k, price.output_per_1k, price.cached_rate) == (
        Decimal("0.20"),
        Decimal("0.80"),
        Decimal("0.05"),
    )


def test_load_single_list_and_wrapped_forms() -> None:
    second = config(version="2026-04")
    assert list(load_routes(config())) == ["support-tier2@2026-03"]
    assert list(load_routes([config(), second])) == [
        "support-tier2@2026-03",
        "support-tier2@2026-04",
    ]
    assert list(load_routes({"routes": [second]})) == ["support-tier2@2026-04"]


def test_load_from_json_file(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"routes": [DEFAULT_ROUTE_CONFIG]}))
    assert load_routes_file(path)["support-tier2@2026-03"] == DEFAULT_ROUTE


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read routes"):
        load_routes_file(path)


def test_unpinned_primary_is_rejected_at_load() -> None:
    with pytest.raises(ConfigError, match=r"support-tier2@2026-03: primary\.model.*latest"):
        load_routes(config(primary={"provider": "openai", "model": "gpt-4o-latest"}))


def test_unpinned_fallback_is_rejected_at_load() -> None:
    fb = {"provider": "openai", "model": "gpt-4o", "allowed_for": ["summarize"]}
    with pytest.raises(ConfigError, match=r"fallback\.model.*not pinned"):
        load_routes(config(fallback=fb))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"primary": {"provider": "p", "model": "model-x-2026-03", "pinned": False}}, "pinned"),
        ({"prices": {}}, "no price"),
        ({"output": {"schema": "proposal_v9"}}, "unknown schema"),
        ({"output": {"schema": {"type": "nonsense"}}}, "output"),
        ({"output": {"schema": "proposal_v3", "on_invalid": "retry_forever"}}, "on_invalid"),
        (
            {
                "budgets": {
                    "max_calls_per_task": 0,
                    "max_input_tokens_per_call": 1,
                    "max_input_tokens_per_task": 1,
                }
            },
            "max_calls_per_task",
        ),
        ({"timeouts": {"connect_s": 1, "total_s": 0}}, "total_s"),
        ({"timeout": {"connect_s": 1, "total_s": 2}}, "timeout"),  # a typo is not ignored
        ({"name": "Support Tier 2"}, "name"),
        ({"fallback": {"provider": "p", "model": "m-2026-01", "allowed_for": []}}, "allowed_for"),
    ],
)
def test_invalid_configs_are_rejected(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_routes(config(**changes))


def test_duplicate_route_is_rejected() -> None:
    with pytest.raises(ConfigError, match="defined twice"):
        load_routes([config(), config()])


def test_inline_schema_and_no_fallback() -> None:
    schema = {"type": "object", "required": ["answer"]}
    route = load_routes(config(fallback=None, output={"schema": schema}))["support-tier2@2026-03"]
    assert route.fallback is None
    assert route.output.schema_dict == schema
