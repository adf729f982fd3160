"""Requests and responses as plain values, so routing and faults are testable without a socket."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agent_jobs.sim.errors import SimError
from agent_jobs.sim.models import Json, describe

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Request:
    """One parsed HTTP request. `headers` has lower-case names; `query` keeps repeated values."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: bytes
    framing_error: SimError | None = None

    def json(self) -> Any:
        """The body as JSON; an empty or malformed body is the caller's `invalid_body`."""
        if not self.body.strip():
            raise SimError(400, "invalid_body", "a JSON body is required")
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SimError(400, "invalid_body", f"body is not valid JSON: {e}") from None

    def parse(self, model: type[M]) -> M:
        try:
            return model.model_validate(self.json())
        except ValidationError as e:
            raise SimError(400, "invalid_body", describe(e)) from None

    def params(self, allowed: set[str], required: frozenset[str] = frozenset()) -> dict[str, str]:
        """Single-valued query parameters; unknown, repeated or missing ones are `invalid_query`."""
        unknown = sorted(set(self.query) - allowed)
        if unknown:
            raise SimError(
                400,
                "invalid_query",
                f"unknown query parameter(s) {unknown}; allowed: {sorted(allowed)}",
            )
        out: dict[str, str] = {}
        for name, values in self.query.items():
            if len(values) != 1:
                raise SimError(400, "invalid_query", f"query parameter {name!r} given twice")
            out[name] = values[0]
        missing = sorted(n for n in required if not out.get(n, "").strip())
        if missing:
            raise SimError(400, "invalid_query", f"query parameter(s) {missing} required")
        return out


@dataclass
class Response:
    """What to send back. `drop` means: send nothing and close the connection."""

    status: int
    body: Json | None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    close: bool = False
    fault: str | None = None

    @classmethod
    def error(cls, error: SimError) -> Response:
        return cls(error.status, error.body(), dict(error.headers))

    @property
    def error_code(self) -> str | None:
        if self.body is None or not isinstance(self.body.get("error"), dict):
            return None
        code = self.body["error"].get("code")
        return code if isinstance(code, str) else None
