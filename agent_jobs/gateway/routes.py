"""Model routes from configuration.

A route is versioned (`support-tier2@2026-03`) and tasks pin the version they started under, so
a route change never alters a task mid-flight. Model ids must be pinned snapshots: a provider-side
alias change (`...-latest`, or a bare family name like `gpt-4o`) would silently change behaviour
underneath the evaluation gate, so such ids are rejected when the configuration is loaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from jsonschema import SchemaError  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic import model_validator as _model_validator

from agent_jobs.core.errors import ConfigError
from agent_jobs.gateway.contracts import Timeouts
from agent_jobs.gateway.costmodel import SEED_PRICE, Price
from agent_jobs.gateway.schemas import SCHEMAS, validator_for

_ROUTE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")
# Names providers use for moving targets. A component equal to one of these is an alias.
_ALIASES = frozenset({"latest", "stable", "current", "default", "auto", "newest", "live"})
_DIGEST = re.compile(r"@sha256:[0-9a-f]{12,64}$")


def check_pinned_model(model: str) -> str:
    """Return `model` if it names an exact snapshot, else raise `ValueError` saying why.

    Pinned means: no alias component (latest, stable, ...), not ending in "latest", and either a
    snapshot marker (a run of 4+ digits as its own component: `2026-03`, `20241022`, `0125`) or
    a content digest (`name@sha256:...`).
    """
    if not model or not model.strip():
        raise ValueError("model id is empty")
    if not _MODEL_ID.match(model):
        raise ValueError(f"model id {model!r} has characters outside [A-Za-z0-9._:/@+-]")
    if model.lower().endswith("latest"):
        raise ValueError(f"model id {model!r} ends with 'latest': pin an exact snapshot")
    parts = [p for p in re.split(r"[-_.:/@+]", model.lower()) if p]
    alias = next((p for p in parts if p in _ALIASES), None)
    if alias:
        raise ValueError(f"model id {model!r} contains the alias {alias!r}: pin an exact snapshot")
    if _DIGEST.search(model) or any(p.isdigit() and len(p) >= 4 for p in parts):
        return model
    raise ValueError(
        f"model id {model!r} is not pinned: name a dated snapshot (e.g. 'model-x-2026-03') "
        "or a digest ('name@sha256:...')"
    )


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelTarget(_Config):
    """A provider (a key of the gateway's providers) and an exact model id."""

    provider: str = Field(min_length=1)
    model: str
    # Accepted so configs can say it, as the seed does; a target cannot be unpinned.
    pinned: Literal[True] = True

    @field_validator("model")
    @classmethod
    def _pinned(cls, v: str) -> str:
        return check_pinned_model(v)


class FallbackTarget(ModelTarget):
    """Used when the primary is unavailable, and only for the listed step types: a different
    model follows the schema and borderline cases differently, so high-risk steps wait instead."""

    allowed_for: frozenset[str] = Field(min_length=1)


class BreakerConfig(_Config):
    open_after_failures: int = Field(ge=1)
    window_s: float = Field(gt=0)
    half_open_after_s: float = Field(ge=0)


class Budgets(_Config):
    max_calls_per_task: int = Field(ge=1)
    max_input_tokens_per_call: int = Field(ge=1)
    max_input_tokens_per_task: int = Field(ge=1)


class OutputConfig(_Config):
    """`schema` is a registered name (`proposal_v3`) or an inline JSON Schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    # `schema` would shadow a BaseModel attribute, hence the alias.
    schema_: str | dict[str, Any] = Field(alias="schema", default="proposal_v3")
    on_invalid: Literal["repair_once_then_fail"] = "repair_once_then_fail"

    @field_validator("schema_")
    @classmethod
    def _known(cls, v: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(v, str) and v not in SCHEMAS:
            raise ValueError(f"unknown schema {v!r}; known: {', '.join(sorted(SCHEMAS))}")
        if isinstance(v, dict):
            try:
                validator_for(v)
            except SchemaError as exc:
                raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        return v

    @property
    def schema_dict(self) -> dict[str, Any]:
        return SCHEMAS[self.schema_] if isinstance(self.schema_, str) else self.schema_


class Route(_Config):
    """One versioned route. `key` (`name@version`) is how tasks pin and requests name it."""

    name: str
    version: str
    primary: ModelTarget
    fallback: FallbackTarget | None = None
    timeouts: Timeouts
    breaker: BreakerConfig
    budgets: Budgets
    output: OutputConfig = Field(default_factory=OutputConfig)
    prices: dict[str, Price]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _ROUTE_NAME.match(v):
            raise ValueError("route name must be 1-63 characters of a-z, 0-9, '_', '-', '.'")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not _VERSION.match(v):
            raise ValueError("route version must be 1-32 characters of A-Z, a-z, 0-9, '_-.'")
        return v

    @_model_validator(mode="after")
    def _priced(self) -> Route:
        targets = [self.primary] + ([self.fallback] if self.fallback else [])
        missing = [t.model for t in targets if t.model not in self.prices]
        if missing:
            raise ValueError(f"no price for model(s) {', '.join(missing)}: every call is accounted")
        return self

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    def price_for(self, model: str) -> Price:
        return self.prices[model]


def _route(data: Mapping[str, Any]) -> Route:
    try:
        return Route.model_validate(dict(data))
    except ValidationError as exc:
        where = data.get("name", "?"), data.get("version", "?")
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'route'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"route {where[0]}@{where[1]}: {problems}") from exc


def load_routes(data: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> dict[str, Route]:
    """Routes keyed by `name@version` from `{"routes": [...]}`, a list, or a single route dict.

    Raises `ConfigError` naming the route and field for any invalid entry, including an
    unpinned model id, and for a duplicate `name@version`.
    """
    if isinstance(data, Mapping):
        entries: Iterable[Mapping[str, Any]] = data.get("routes", [data])
    else:
        entries = data
    routes: dict[str, Route] = {}
    for entry in entries:
        route = _route(entry)
        if route.key in routes:
            raise ConfigError(f"route {route.key} is defined twice")
        routes[route.key] = route
    return routes


def load_routes_file(path: str | Path) -> dict[str, Route]:
    """`load_routes` over a JSON file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read routes from {path}: {exc}") from exc
    return load_routes(data)


SCRIPTED_PRIMARY_MODEL = "scripted-refund-2026-03"
SCRIPTED_FALLBACK_MODEL = "scripted-refund-small-2026-02"

DEFAULT_ROUTE_CONFIG: dict[str, Any] = {
    "name": "support-tier2",
    "version": "2026-03",
    "primary": {"provider": "scripted", "model": SCRIPTED_PRIMARY_MODEL},
    "fallback": {
        "provider": "scripted",
        "model": SCRIPTED_FALLBACK_MODEL,
        "allowed_for": ["summarize", "draft_reply"],
    },
    "timeouts": {"connect_s": 1.0, "total_s": 20.0},
    "breaker": {"open_after_failures": 5, "window_s": 30.0, "half_open_after_s": 20.0},
    "budgets": {
        "max_calls_per_task": 8,
        "max_input_tokens_per_call": 12_000,
        "max_input_tokens_per_task": 60_000,
    },
    "output": {"schema": "proposal_v3", "on_invalid": "repair_once_then_fail"},
    "prices": {
        SCRIPTED_PRIMARY_MODEL: SEED_PRICE.model_dump(mode="json"),
        SCRIPTED_FALLBACK_MODEL: SEED_PRICE.model_dump(mode="json"),
    },
}

DEFAULT_ROUTE: Route = _route(DEFAULT_ROUTE_CONFIG)
DEFAULT_ROUTE_KEY = DEFAULT_ROUTE.key
