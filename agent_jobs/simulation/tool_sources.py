"""The lost-laptop agent of `two_effects` with its tools declared as a team declares them for
systems it does not own: device management is an OpenAPI document (`agents.openapi`, the
product's HTTP adapter), procurement an MCP server (`tools.mcp`, the SDK's client session).
The agent's policy, rule, claims and scripted model are the same declaration
(`two_effects.laptop_agent`); only where its tools come from differs.

Both systems answer in-process, from the scenario's simulated systems of record:

- device management over HTTP (`http_systems`): a disable once per `Idempotency-Key`, a 429
  with `Retry-After`, a 409, a refused connection, no answer in time; its lookup by key
  answers 404 when nothing is under the key (the OpenAPI lookup's documented "none");
- procurement over MCP, an `MCPServer` on the SDK's in-memory streams, run on the caller's
  thread (`McpTransport`): an order once per key; a throttle or refusal is an `isError`
  result; an outage or no answer in time fails the connection after the call left; its
  lookup by key says "not found" in each documented way, drawn per call: `isError` with the
  code in its structured content, `isError` whose text starts with `not_found`, or
  `{"found": null}`.

The systems' hooks for procurement are held until the MCP exchange is over (`_Held`): a worker
that dies, an oracle that objects, or other work the schedule runs meanwhile, happens on the
caller's side of the call, after the system applied the request and before its answer is read.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import mcp_types
from mcp.client._memory import InMemoryTransport  # the SDK's own in-memory transport
from mcp.server.mcpserver import MCPServer

from agent_jobs.agents import Agent
from agent_jobs.agents.openapi import effect, lookup, openapi_tools, read
from agent_jobs.sim.messages import Request, Response
from agent_jobs.simulation.http_systems import Unreachable, answer, error, session
from agent_jobs.simulation.systems import Call, Hooks, SystemRefused, SystemTimeout
from agent_jobs.simulation.two_effects import Fleet, TwoEffectsScenario
from agent_jobs.tools.http import SystemsConfig
from agent_jobs.tools.mcp import McpToolSource
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig

if TYPE_CHECKING:
    from agent_jobs.simulation.world import World

T = TypeVar("T")
DEVICES_URL = "SIM_DEVICES_URL"
_ID = {"name": "device_id", "in": "path", "required": True,
       "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}}  # fmt: skip
DEVICES_SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Device management", "version": "1"},
    "paths": {
        "/devices/{device_id}": {"get": {"operationId": "get", "parameters": [_ID],
                                         "summary": "Read a device."}},
        "/devices/{device_id}/disable": {"post": {"operationId": "disable", "parameters": [_ID],
                                                  "summary": "Disable a device."}},
        "/disables": {"get": {"operationId": "disableByKey", "summary": "The disable under a key.",
                              "parameters": [{"name": "idempotency_key", "in": "query",
                                              "required": True, "schema": {"type": "string"}}]}},
    },
}  # fmt: skip


def device_api(fleet: Fleet) -> Callable[[Request], Response]:
    """Device management's HTTP API (`DEVICES_SPEC`) on the fleet's device system."""
    system = fleet.devices

    def serve(request: Request) -> Response:
        parts = request.path.strip("/").split("/")
        try:
            if request.method == "GET" and parts[0] == "disables":
                key = (request.query.get("idempotency_key") or [""])[0]
                found = system.lookup(key)
                return answer(200, found) if found else error(404, "not_found", "none")
            if request.method == "POST" and parts[-1] == "disable":
                key = request.headers.get("idempotency-key", "")
                return answer(200, fleet.disable_applied(parts[1], key))
            system.read(parts[1])
        except SystemRefused as exc:
            if exc.code == "throttled":
                wait = str(int(exc.retry_after_s or 1))
                return error(429, "rate_limited", "slow down", **{"Retry-After": wait})
            if exc.code == "rejected":
                return error(409, "not_active", "the device is not active")
            if request.method == "POST":
                raise Unreachable("device management") from exc
            return error(503, "unavailable", "device management is down")
        known = fleet.known.get(parts[1])
        if known is None:
            return error(404, "device_not_found", f"no device {parts[1]}")
        return answer(200, {"device_id": parts[1], "status": known[0],
                            "replacement_minor": known[1], "currency": "EUR"})  # fmt: skip

    return serve


class _Held(Hooks):
    """A system's hooks as seen from inside an MCP exchange: who calls and a slow call pass
    through; what may stop the caller or run other work waits for the exchange to end."""

    def __init__(self, world: Hooks) -> None:
        self.world = world
        self.stopped: BaseException | None = None  # a dying worker, a broken invariant
        self.later: list[str] = []

    def caller(self) -> str:
        return self.world.caller()

    def before_send(self) -> None:
        self._stop_on(self.world.before_send)

    def received(self, call: Call) -> None:
        self._stop_on(lambda: self.world.received(call))

    def during_call(self, where: str) -> None:
        self.later.append(where)

    def slow_call(self) -> None:
        self.world.slow_call()

    def _stop_on(self, hook: Callable[[], None]) -> None:
        try:
            hook()
        except BaseException as exc:  # raised again on the caller's side (`InProcessMcp.run`)
            self.stopped = exc
            raise _Stopped from None


class _Stopped(Exception):
    """The exchange ends here: what stopped it is raised on the caller's side."""


class InProcessMcp:
    """Procurement's MCP server, connected in-process (the product's `McpTransport`)."""

    def __init__(self, fleet: Fleet, world: World) -> None:
        self.fleet = fleet
        self.world = world
        self.held = _Held(world)
        fleet.orders.hooks = self.held
        self.failure: Exception | None = None  # how the exchange fails once it is over
        self.refusal = ""
        self.server = MCPServer("sim-procurement")
        self.server.tool()(self.create)
        self.server.tool()(self.by_key)

    # -- the McpTransport ------------------------------------------------------------------

    def streams(self, over: Callable[[str], None]) -> AbstractAsyncContextManager[Any]:
        return InMemoryTransport(self.server)

    def run(self, call: Callable[[], Awaitable[T]], timeout_s: float) -> T:
        # On this thread, with no deadline of the wall clock: the simulated clock is the one
        # that moves (a slow system), and a schedule replays whatever the machine's load.
        self.failure, self.refusal, self.held.stopped, self.held.later = None, "", None, []
        result = _run_here(call)
        if self.held.stopped is not None:
            raise self.held.stopped
        for where in self.held.later:
            self.world.during_call(where)
        if self.failure is not None:
            raise self.failure
        return result

    # -- procurement's tools ----------------------------------------------------------------

    async def create(
        self, device_id: str, price_minor: int, currency: str, idempotency_key: str
    ) -> mcp_types.CallToolResult:
        """Order the replacement of a device at a price (once per key)."""
        with self._exchange():
            done = self.fleet.order_applied(device_id, price_minor, currency, idempotency_key)
            return _result(done)
        return _failed(self.refusal or self.failure)

    async def by_key(self, idempotency_key: str) -> mcp_types.CallToolResult:
        """The order made under a key."""
        with self._exchange():
            found = self.fleet.orders.lookup(idempotency_key)
            if found is not None:
                return _result({"found": found})
            way = self.world.choices.draw(3)
            if way == 2:
                return _result({"found": None})
            text = "nothing under this key" if way == 0 else "not_found: nothing under this key"
            structured = {"code": "not_found"} if way == 0 else None
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=text)],
                structured_content=structured, is_error=True)  # fmt: skip
        return _failed(self.refusal or self.failure)

    @contextmanager
    def _exchange(self) -> Iterator[None]:
        try:
            yield
        except _Stopped:
            self.failure = ConnectionError("the caller is gone")
        except SystemTimeout as exc:
            self.failure = TimeoutError(str(exc))
        except SystemRefused as exc:
            if exc.code in ("throttled", "rejected"):
                self.refusal = exc.code  # a definitive refusal: an `isError` result
            else:
                self.failure = ConnectionError(f"procurement {exc.code}")


def _run_here(call: Callable[[], Awaitable[T]]) -> T:
    """`call` to its end, the caller waiting. An event loop may already run on this thread (a
    caller's own, or one a library left marked running, as Playwright's sync API does):
    `anyio.run` refuses to start a second one there, and the refusal would read as procurement
    unreachable at every call, a schedule that never sends yet passes. Then the exchange runs
    on a thread of its own, in this thread's context, and is waited for, so the schedule stays
    one sequence of steps."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(call)
    context = contextvars.copy_context()

    def beside() -> T:
        return context.run(lambda: anyio.run(call))

    with ThreadPoolExecutor(1, thread_name_prefix="sim-mcp") as pool:
        return pool.submit(beside).result()


def _result(value: dict[str, Any]) -> mcp_types.CallToolResult:
    text = mcp_types.TextContent(type="text", text=json.dumps(value))
    return mcp_types.CallToolResult(content=[text], structured_content=value)


def _failed(failure: Exception | str | None) -> mcp_types.CallToolResult:
    text = mcp_types.TextContent(type="text", text=str(failure or "failed"))
    return mcp_types.CallToolResult(content=[text], is_error=True)


def declare_sources(agent: Agent, fleet: Fleet, world: World) -> None:
    """Device management's OpenAPI operations and procurement's MCP tools, on `agent`."""
    agent.openapi(openapi_tools(
        DEVICES_SPEC, prefix="devices", base_url_setting=DEVICES_URL,
        config=SystemsConfig(defaults={DEVICES_URL: "http://devices.sim"}, environ={}),
        session=session(device_api(fleet)),
        operations={"get": read(),
                    "disable": effect(key="disable:{tenant_id}:{device_id}",
                                      lookup="disableByKey"),
                    "disableByKey": lookup()}))  # fmt: skip
    config = McpSourceConfig("orders", HttpServer("http://procurement.sim/mcp"), (
        McpToolConfig("create", "effect", frozenset({"execute"}), key_arg="idempotency_key",
                      key="replace:{tenant_id}:{device_id}", lookup="orders.by_key"),
        McpToolConfig("by_key", "read", frozenset({"reconcile"})),
    ))  # fmt: skip
    agent.mcp(McpToolSource(config, transport=InProcessMcp(fleet, world)))


class ToolSourcesScenario(TwoEffectsScenario):
    """The lost-laptop agent with OpenAPI and MCP tools (see the module docstring)."""

    sources = True
