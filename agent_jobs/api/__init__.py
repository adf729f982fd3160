"""The HTTP API (FastAPI). `create_app` builds it; `agent-jobs api` serves it under uvicorn.

Importing the package imports nothing heavy: `agent_jobs.api.models` (pydantic only) is what
the Python client uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from agent_jobs.api.deps import ApiRuntime
    from agent_jobs.config import Settings


def create_app(runtime: ApiRuntime | None = None, settings: Settings | None = None) -> FastAPI:
    """See `agent_jobs.api.app.create_app`."""
    from agent_jobs.api.app import create_app as _create  # noqa: PLC0415

    return _create(runtime, settings)


__all__ = ["create_app"]
