"""Typed Python functions as tools: the argument schema derived from the signature.

A tool function takes keyword arguments with type hints (`str`, `int`, `Literal[...]`, pydantic
models, ...) and returns a JSON object (a `dict`, a pydantic model, or None for `{}`). Its
docstring's first paragraph is the description the model sees. The schema is pydantic's, closed
(`additionalProperties: false`: an argument the model invents is refused, never dropped), and
the executor validates against it before the function runs; the function then receives values
pydantic has coerced to its hints.

An effect's function may take `idempotency_key`: the executor fills it with the key it derived
from the declaration's template; the model never sees or sets it.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from agent_jobs.core.errors import ConfigError
from agent_jobs.tools.adapter import Invocation, ServiceRejected

KEY_PARAM = "idempotency_key"


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


def args_model(fn: Callable[..., Any], *, exclude: frozenset[str]) -> type[BaseModel]:
    """A pydantic model of `fn`'s keyword arguments (less `exclude`), every one type-hinted."""
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name in exclude:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigError(f"tool {fn.__qualname__}: argument {name} must be a plain keyword")
        if name not in hints:
            raise ConfigError(f"tool {fn.__qualname__}: argument {name} has no type hint")
        default = ... if param.default is param.empty else param.default
        fields[name] = (hints[name], default)
    model: type[BaseModel] = create_model(f"{fn.__name__}_args", __base__=_Closed, **fields)
    return model


def args_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema, closed, without pydantic's titles (noise to a model)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema["additionalProperties"] = False
    schema.setdefault("properties", {})
    return schema


def describe(fn: Callable[..., Any]) -> str:
    """The docstring's first paragraph: what the model is told the tool does."""
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def as_json_object(value: Any) -> Any:
    """What a tool function returned, as the JSON the executor records."""
    if value is None:
        return {}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


class FunctionAdapter:
    """Calls a tool function in-process with the validated, coerced arguments (and the key for
    an effect that asks for it). Runs inside `PythonCallableAdapter`'s timeout thread."""

    def __init__(self, fn: Callable[..., Any], model: type[BaseModel], *, takes_key: bool) -> None:
        self._fn = fn
        self._model = model
        self._takes_key = takes_key

    def __call__(self, args: dict[str, Any], inv: Invocation) -> Any:
        try:
            parsed = self._model.model_validate(args)
        except ValidationError as exc:
            raise ServiceRejected("bad_args", str(exc).splitlines()[0][:300]) from None
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self._takes_key:
            kwargs[KEY_PARAM] = inv.idempotency_key
        return as_json_object(self._fn(**kwargs))
