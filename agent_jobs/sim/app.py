"""The sim as a function from `Request` to `Response`: route, apply any armed fault, log.

Faults wrap the handler rather than live inside it, so every operation fails the same five ways:
`delay`, `error_before_commit` and `throttle` act before the handler runs, `error_after_commit`
and `drop_after_commit` after it has run (and committed, for a write). The HTTP layer only has
to honour `Response.drop` by closing the socket without writing.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from agent_jobs.core.clock import Clock, SystemClock
from agent_jobs.sim import routes
from agent_jobs.sim.errors import SimError
from agent_jobs.sim.faults import Fault, FaultBoard
from agent_jobs.sim.messages import Request, Response
from agent_jobs.sim.models import OPERATIONS
from agent_jobs.sim.request_log import LogEntry, RequestLog
from agent_jobs.sim.world import World

log = logging.getLogger(__name__)


class SimApp:
    """The world, the armed faults and the request log, and how a request passes through them."""

    def __init__(self, world: World, *, clock: Clock | None = None) -> None:
        self.world = world
        self.faults = FaultBoard()
        self.log = RequestLog()
        # Set on shutdown so a `delay` fault stops sleeping instead of holding the server open.
        self.stopping = threading.Event()
        self._clock: Clock = clock or SystemClock()
        self._services = routes.Services(world, self.faults, self.log)

    def handle(self, request: Request) -> tuple[Response, LogEntry]:
        """Serve one request. The caller writes the response and then calls `log.finish(entry)`."""
        matched: routes.Match | None = None
        miss: SimError | None = None
        try:
            matched = routes.match(request)
        except SimError as e:
            miss = e
        operation = matched.operation if matched else None
        entry = self.log.begin(
            received_at=self._clock.now().isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            method=request.method,
            path=request.path,
            query={k: ",".join(v) for k, v in request.query.items()},
            operation=operation,
            idempotency_key=request.headers.get("idempotency-key"),
            authorization=request.headers.get("authorization"),
            body=_loggable_body(request, operation),
        )
        if request.framing_error is not None:
            # The connection's byte stream can no longer be trusted: answer, then close it.
            response = Response.error(request.framing_error)
            response.close = True
            return response, entry
        if matched is None:
            assert miss is not None
            return Response.error(miss), entry
        return self._run(matched, request), entry

    def _run(self, matched: routes.Match, request: Request) -> Response:
        fault: Fault | None = None
        if matched.operation in OPERATIONS:
            fault = self.faults.take(matched.operation)
        kind = fault.kind if fault else None
        if fault is not None and fault.delay_s is not None:
            self.stopping.wait(fault.delay_s)
        if kind == "error_before_commit":
            response = _injected(503, f"injected fault before {matched.operation} did anything")
        elif kind == "throttle":
            response = Response.error(
                SimError(429, "rate_limited", f"injected throttle: {matched.operation} not done")
            )
        else:
            response = self._call(matched, request)
            if kind == "error_after_commit":
                response = _injected(500, f"injected fault after {matched.operation} committed")
            elif kind == "drop_after_commit":
                response = Response(0, None, drop=True)
        if fault is not None and fault.retry_after is not None:
            response.headers["Retry-After"] = fault.retry_after
        response.fault = kind
        return response

    def _call(self, matched: routes.Match, request: Request) -> Response:
        try:
            return matched.route.handler(self._services, request, matched.params)
        except SimError as e:
            return Response.error(e)
        except Exception as e:
            # A bug in the sim must look like a server error to the caller, not kill the thread.
            log.exception("sim: %s %s failed", request.method, request.path)
            return Response.error(SimError(500, "internal_error", f"{type(e).__name__}: {e}"))


def _injected(status: int, message: str) -> Response:
    return Response.error(SimError(status, "injected_fault", message))


def _loggable_body(request: Request, operation: str | None) -> Any:
    # Business calls keep their body (tests assert on the amount sent); admin bodies such as a
    # whole world would only bloat the log.
    if operation not in OPERATIONS or not request.body.strip():
        return None
    try:
        return json.loads(request.body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return request.body.decode("utf-8", errors="replace")
