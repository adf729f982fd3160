"""`Deadline`: every API answer comes back within `AGENT_JOBS_API_REQUEST_TIMEOUT_S`.

The database settings bound each wait a request can meet there (pool, connect, statement, lock),
but not one: a connection that stopped answering in the middle of a statement (a middlebox that
keeps the TCP connection up and relays nothing) leaves the driver waiting with no timeout of its
own. A request whose answer has not started by the deadline is answered `503 unavailable`
here; its handler's thread finishes on its own later, and whatever it would have answered is
dropped. Every write the API offers is safe to retry (idempotency keys, cancel, a decision
already taken), which is what a 503 asks the client to do.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_jobs.api.errors import error_response
from agent_jobs.store.engine import database_error_line

log = logging.getLogger(__name__)

MESSAGE = "the request did not complete in time (the database may be unreachable); retry later"


class Deadline:
    """503 for an HTTP request whose answer has not started after `seconds` (0: no deadline)."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.seconds <= 0:
            await self.app(scope, receive, send)
            return
        started = False
        abandoned = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if abandoned:
                return  # answered already, by the deadline
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, guarded_send))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.seconds)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task in done or started:
            await task  # finished, or its answer is on the way: let it complete (or raise)
            return
        abandoned = True
        task.add_done_callback(_late)
        log.warning(
            "%s %s: no answer after %.0f s; answered 503",
            scope.get("method", ""),
            scope.get("path", ""),
            self.seconds,
        )
        await error_response(503, "unavailable", MESSAGE)(scope, receive, send)


def _late(task: asyncio.Future[None]) -> None:
    """An abandoned request ended: its error, if any, is retrieved (and logged in one line)."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.warning("an abandoned request ended with %s", database_error_line(exc))
