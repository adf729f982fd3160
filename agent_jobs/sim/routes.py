"""The route table and one handler per route: the HTTP contract of `CONTRACT.md`, in code.

Handlers turn a `Request` into a `Response` or raise `SimError`; they know nothing of sockets or
faults (`app` applies those around them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from agent_jobs.sim.errors import SimError
from agent_jobs.sim.faults import FaultBoard
from agent_jobs.sim.messages import Request, Response
from agent_jobs.sim.models import FaultRequest, RefundRequest, WorldData
from agent_jobs.sim.request_log import RequestLog
from agent_jobs.sim.world import World

# Same alphabet the platform derives keys in: printable ASCII, no spaces, at most 255 characters.
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
MAX_SEARCH_LIMIT = 50
MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class Services:
    world: World
    faults: FaultBoard
    log: RequestLog


Params = dict[str, str]
Handler = Callable[[Services, Request, Params], Response]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: tuple[str, ...]
    operation: str
    handler: Handler


@dataclass(frozen=True)
class Match:
    route: Route
    params: Params
    operation: str


def ok(body: dict[str, object], status: int = 200, **headers: str) -> Response:
    return Response(status, dict(body), dict(headers))


# -- business routes ---------------------------------------------------------------------------


def healthz(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    return ok({"ok": True})


def get_order(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    return ok(s.world.get_order(p["order_id"]))


def list_payments(s: Services, r: Request, p: Params) -> Response:
    q = r.params({"order_id"}, frozenset({"order_id"}))
    return ok({"payments": s.world.list_payments(q["order_id"])})


def create_refund(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    key = r.headers.get("idempotency-key", "").strip()
    if not key:
        raise SimError(
            400, "idempotency_key_required", "POST /refunds needs an Idempotency-Key header"
        )
    if not _IDEMPOTENCY_KEY.match(key):
        raise SimError(
            400,
            "invalid_idempotency_key",
            "Idempotency-Key must be 1-255 printable ASCII characters without spaces",
        )
    body = r.parse(RefundRequest)
    refund, replayed = s.world.create_refund(key, body)
    if replayed:
        return ok(refund, 200, **{"Idempotent-Replayed": "true"})
    return ok(
        refund,
        201,
        **{"Idempotent-Replayed": "false", "Location": f"/refunds/{refund['refund_id']}"},
    )


def find_refunds(s: Services, r: Request, p: Params) -> Response:
    q = r.params({"idempotency_key", "payment_id"})
    if not q:
        raise SimError(
            400, "invalid_query", "GET /refunds needs idempotency_key or payment_id (or both)"
        )
    found = s.world.find_refunds(
        idempotency_key=q.get("idempotency_key"), payment_id=q.get("payment_id")
    )
    return ok({"refunds": found})


def get_refund(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    return ok(s.world.get_refund(p["refund_id"]))


def get_policy(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    version: int | None = None
    if "version" in p:
        if not p["version"].isdigit():
            s.world.get_policy(p["doc_id"])  # an unknown document is reported as such first
            raise SimError(
                404, "policy_version_not_found", f"{p['version']!r} is not a version number"
            )
        version = int(p["version"])
    return ok(s.world.get_policy(p["doc_id"], version))


def search_policies(s: Services, r: Request, p: Params) -> Response:
    q = r.params({"q", "doc_id", "limit"}, frozenset({"q"}))
    limit = _int_param(q, "limit", default=5, low=1, high=MAX_SEARCH_LIMIT)
    passages = s.world.search_policies(q["q"], doc_id=q.get("doc_id"), limit=limit)
    return ok({"passages": passages})


# -- admin routes ------------------------------------------------------------------------------


def admin_reset(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    s.world.reset()
    s.faults.clear()
    s.log.clear()
    return ok({"ok": True})


def admin_put_world(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    data = r.parse(WorldData)
    s.world.load(data)
    return ok(
        {
            "ok": True,
            "orders": len(data.orders),
            "payments": len(data.payments),
            "refunds": len(data.refunds),
            "policies": len(data.policies),
        }
    )


def admin_get_world(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    return ok(s.world.dump().model_dump(mode="json"))


def admin_arm_fault(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    return ok(s.faults.arm(r.parse(FaultRequest)).to_json(), 201)


def admin_list_faults(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    return ok({"faults": [f.to_json() for f in s.faults.armed()]})


def admin_clear_faults(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    return ok({"cleared": s.faults.clear()})


def admin_list_requests(s: Services, r: Request, p: Params) -> Response:
    q = r.params({"operation", "min_count", "wait_s"})
    operation = q.get("operation")
    satisfied = True
    if "min_count" in q:
        count = _int_param(q, "min_count", default=0, low=0, high=1_000_000)
        wait_s = _float_param(q, "wait_s", default=10.0, high=MAX_WAIT_S)
        satisfied = s.log.wait_for(count, operation, timeout=wait_s)
    return ok({"requests": s.log.entries(operation), "satisfied": satisfied})


def admin_clear_requests(s: Services, r: Request, p: Params) -> Response:
    r.params(set())
    s.log.clear()
    return ok({"ok": True})


def _int_param(q: Params, name: str, *, default: int, low: int, high: int) -> int:
    raw = q.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise SimError(400, "invalid_query", f"{name} must be an integer from {low} to {high}")
    return int(raw)


def _float_param(q: Params, name: str, *, default: float, high: float) -> float:
    raw = q.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= high:
        raise SimError(400, "invalid_query", f"{name} must be a number from 0 to {high}")
    return value


# -- the table ---------------------------------------------------------------------------------

ROUTES: tuple[Route, ...] = (
    Route("GET", ("healthz",), "healthz", healthz),
    Route("GET", ("orders", "{order_id}"), "orders.get", get_order),
    Route("GET", ("payments",), "payments.list", list_payments),
    Route("POST", ("refunds",), "refunds.create", create_refund),
    Route("GET", ("refunds",), "refunds.list", find_refunds),
    Route("GET", ("refunds", "{refund_id}"), "refunds.get", get_refund),
    # Before `{doc_id}`, so "search" is a reserved word and never a document id.
    Route("GET", ("policies", "search"), "policies.search", search_policies),
    Route("GET", ("policies", "{doc_id}"), "policies.get", get_policy),
    Route("GET", ("policies", "{doc_id}", "versions", "{version}"), "policies.get", get_policy),
    Route("POST", ("admin", "reset"), "admin.reset", admin_reset),
    Route("PUT", ("admin", "world"), "admin.world.put", admin_put_world),
    Route("GET", ("admin", "world"), "admin.world.get", admin_get_world),
    Route("POST", ("admin", "faults"), "admin.faults.arm", admin_arm_fault),
    Route("GET", ("admin", "faults"), "admin.faults.list", admin_list_faults),
    Route("DELETE", ("admin", "faults"), "admin.faults.clear", admin_clear_faults),
    Route("GET", ("admin", "requests"), "admin.requests.list", admin_list_requests),
    Route("DELETE", ("admin", "requests"), "admin.requests.clear", admin_clear_requests),
)


def match(request: Request) -> Match:
    """The route for `request`, or a SimError: 404 `not_found`, 405 `method_not_allowed`."""
    segments = tuple(unquote(s) for s in request.path.strip("/").split("/"))
    allowed: list[str] = []
    for route in ROUTES:
        params = _bind(route.pattern, segments)
        if params is None:
            continue
        if route.method != request.method:
            allowed.append(route.method)
            continue
        operation = route.operation
        # The reconcile lookup is its own operation so a fault can target it and not the others.
        if operation == "refunds.list" and "idempotency_key" in request.query:
            operation = "refunds.get_by_key"
        return Match(route, params, operation)
    if allowed:
        methods = ", ".join(sorted(set(allowed)))
        raise SimError(
            405,
            "method_not_allowed",
            f"{request.method} {request.path}: allowed {methods}",
            {"Allow": methods},
        )
    raise SimError(404, "not_found", f"no route for {request.method} {request.path}")


def _bind(pattern: tuple[str, ...], segments: tuple[str, ...]) -> Params | None:
    if len(pattern) != len(segments):
        return None
    params: Params = {}
    for want, got in zip(pattern, segments, strict=True):
        if want.startswith("{"):
            if not got:
                return None
            params[want[1:-1]] = got
        elif want != got:
            return None
    return params
