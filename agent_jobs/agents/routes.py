"""Model routes from configuration, for every workflow: the routes file of
`AGENT_JOBS_MODEL_ROUTES` (`gateway.load_routes` format) with an optional `"providers"` object
naming OpenAI-compatible providers, or the built-in scripted route when unset:

    {"providers": {"local": {"type": "openai_compat", "base_url": "http://127.0.0.1:8000/v1",
     "api_key_env": null, "response_format": "json_object"}}, "routes": [...]}

The scripted provider is the caller's (each workflow scripts its own model) and always present
under `scripted`, so a routes file may keep a scripted route next to real ones (for evals).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_jobs.core.errors import ConfigError
from agent_jobs.gateway import DEFAULT_ROUTE, OpenAICompatProvider, Provider, Route, load_routes

MODEL_ROUTES = "AGENT_JOBS_MODEL_ROUTES"


def provider_from_spec(name: str, spec: Mapping[str, Any]) -> Provider:
    """One provider of a routes file's `"providers"` object."""
    kind = spec.get("type", "openai_compat")
    if kind == "factory":
        # `"factory": "module:function"` returning a Provider: how evals add adversarial models.
        module, _, attr = str(spec.get("factory") or "").partition(":")
        try:
            made: Provider = getattr(importlib.import_module(module), attr)()
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"provider {name}: factory {spec.get('factory')!r}: {exc}") from exc
        return made
    if kind != "openai_compat":
        raise ConfigError(f"provider {name}: unknown type {kind!r} (known: openai_compat, factory)")
    base_url = spec.get("base_url")
    if not isinstance(base_url, str):
        raise ConfigError(f"provider {name}: base_url is required")
    key_env = spec.get("api_key_env", "OPENAI_API_KEY")
    fmt = spec.get("response_format", "json_schema")
    if fmt not in ("json_schema", "json_object", "none"):
        raise ConfigError(f"provider {name}: response_format {fmt!r} is not supported")
    return OpenAICompatProvider(base_url, key_env, name=name, response_format=fmt)


def routes_and_providers(
    path: str | None, scripted: Provider
) -> tuple[dict[str, Route], dict[str, Provider]]:
    """Routes from `path` (or the built-in one) and the providers they name, with `scripted`
    serving the provider name `scripted` (reserved: a routes file may not redefine it)."""
    providers: dict[str, Provider] = {"scripted": scripted}
    if not path:
        return {DEFAULT_ROUTE.key: DEFAULT_ROUTE}, providers
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{MODEL_ROUTES}={path}: cannot read routes: {exc}") from exc
    if isinstance(data, Mapping):
        for name, spec in dict(data.get("providers") or {}).items():
            if name == "scripted":
                raise ConfigError("provider name 'scripted' is reserved for the scripted model")
            providers[str(name)] = provider_from_spec(str(name), spec)
    return load_routes(data), providers
