"""Reading `AGENT_JOBS_*` values for `config.Settings`: the variables' names, the compact list
forms a value may take (`acme=5:10,beta=0.5:2`, `mypkg.workflows,other.mod`), and the one line per
bad value a failed validation is reported as. Pure functions: nothing here reads the environment
(`config` alone does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

PREFIX = "AGENT_JOBS_"


def env_name(field: str) -> str:
    return PREFIX + field.upper()


def _items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


# -- the compact per-tenant forms, as the field validators' `before` step ---------------------


def parse_rate_limits(raw: Any) -> Any:
    """`acme=5:10,beta=0.5:2` -> ((acme, 5.0, 10), (beta, 0.5, 2))."""
    if not isinstance(raw, str):
        return raw
    out = []
    for item in _items(raw):
        tenant, sep, spec = item.partition("=")
        rate, sep2, burst = spec.partition(":")
        try:
            if not (sep and sep2 and tenant.strip()):
                raise ValueError(item)
            entry = (tenant.strip(), float(rate), int(burst))
        except ValueError:
            raise ValueError(f"{item!r} is not tenant=rate:burst (e.g. acme=5:10)") from None
        if entry[1] < 0 or entry[2] < 0:
            raise ValueError(f"{item!r} must not be negative")
        out.append(entry)
    return tuple(out)


def parse_per_tenant(raw: Any) -> Any:
    """`acme=5,beta=2` -> (("acme", "5"), ("beta", "2")); the field's type converts."""
    if not isinstance(raw, str):
        return raw
    out = []
    for item in _items(raw):
        tenant, sep, value = item.partition("=")
        if not sep or not tenant.strip() or not value.strip():
            raise ValueError(f"{item!r} is not tenant=value (e.g. acme=5)")
        if value.strip().startswith("-"):
            raise ValueError(f"{item!r} must not be negative")
        out.append((tenant.strip(), value.strip()))
    return tuple(out)


def parse_module_names(raw: Any) -> Any:
    """`mypkg.workflows, other.mod` -> ("mypkg.workflows", "other.mod"), each a dotted
    module name, duplicates dropped (a module is imported once anyway)."""
    items = _items(raw) if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        return raw  # the field's type reports it
    out: list[str] = []
    for item in items:
        if len(item) > 200 or not all(part.isidentifier() for part in item.split(".")):
            shown = item if len(item) <= 60 else item[:59] + "…"
            raise ValueError(f"{shown!r} is not a module name (e.g. mypkg.workflows)")
        if item not in out:
            out.append(item)
    return tuple(out)


def one_line_each(exc: ValidationError, data: Mapping[str, Any]) -> str:
    """One line per bad value: `AGENT_JOBS_SWEEP_BATCH='0': must be at least 1`."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        msg = msg.replace("Input should be greater than or equal to", "must be at least")
        msg = msg.replace("Input should be greater than", "must be more than")
        msg = msg.replace("Input should be less than or equal to", "must be at most")
        if loc:
            name = loc[0]
            shown = data.get(name)
            value = f"={shown!r}" if isinstance(shown, str) else ""
            lines.append(f"{env_name(name)}{value}: {msg}")
        else:
            lines.append(f"{PREFIX}{msg}")
    return "\n".join(lines) or "invalid settings"
