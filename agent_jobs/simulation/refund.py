"""The refund agent (`refund_resolution@3`, the product's main workflow) in a simulated world.

The workflow runs as workers run it: its scripted model, its policy (POL-REF-004 with the
approval limit and the operator's autonomy cap), its phases (investigate, policy, decide, the
gate, the refund, the confirming read, the reply, verification), its tools over HTTP through
the product's HTTP adapter. Only the far end is simulated: the business systems of the HTTP
contract (`agent_jobs/sim/CONTRACT.md`) answer in-process (`http_systems`), their handlers the
HTTP simulator's own (`agent_jobs.sim.routes` over its `World`), with the refund write and its
lookup by key behind a `SystemOfRecord`, so they fail as the schedule draws: a 429 with
`Retry-After`, a definitive refusal (4xx), a refused connection, no answer in time (before or
after applying), a slow answer, a lookup that lags the write (`{"refunds": []}`, the contract's
"nothing under this key") or fails (503). Reads fail (503) as the schedule draws too.

The policy the oracle holds each refund to is stated here, from the orders this scenario made,
apart from the workflow's own rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_jobs.sim.errors import SimError
from agent_jobs.sim.faults import FaultBoard
from agent_jobs.sim.messages import Request, Response
from agent_jobs.sim.models import WorldData
from agent_jobs.sim.request_log import RequestLog
from agent_jobs.sim.routes import Services, match
from agent_jobs.sim.world import World as Ledger
from agent_jobs.sim.worlds import policies
from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.http_systems import (
    Unreachable,
    answer,
    error,
    json_body,
    session,
)
from agent_jobs.simulation.oracle import Levers, PolicyOracle, Unwrap
from agent_jobs.simulation.systems import Applied, SystemOfRecord, SystemRefused
from agent_jobs.store import TaskRow

if TYPE_CHECKING:
    from agent_jobs.orchestrator.registry import WorkflowRegistry
    from agent_jobs.simulation.world import World

BASE_URL = "http://payments.sim"
APPROVAL_AT_MINOR = 100_000  # POL-REF-004@4: INR 1,000 or more asks a person
# The orders a task may be about: a duplicate capture under the approval limit, one above it,
# a capture and an authorization hold (no refund), a duplicate already refunded (no refund), an
# order the orders system does not know (404 order_not_found: a person looks).
# Weighted toward the refunds: a refund task takes a dozen steps, so many end cancelled first.
KINDS = {"duplicate": 4, "duplicate_large": 4, "hold": 1, "refunded": 1, "unknown": 1}
AMOUNTS = {"duplicate": 49_900, "duplicate_large": 200_000, "hold": 200_000, "refunded": 75_000}


class Payments:
    """Orders, payments, refunds and policies (the HTTP contract), the refund write and its
    lookup by key on a simulated system of record."""

    def __init__(self, system: SystemOfRecord, world: World) -> None:
        self.system = system
        self.kinds: dict[str, str] = {}  # order id -> kind; never changed once made
        self.ledger = Ledger(WorldData.model_validate({"policies": policies()}), clock=world.clock)
        self.services = Services(self.ledger, FaultBoard(), RequestLog())

    def add(self, order_id: str, kind: str) -> None:
        self.kinds[order_id] = kind
        if kind == "unknown":
            return
        amount = AMOUNTS[kind]
        dump = self.ledger.dump().model_dump(mode="json")
        customer = {"customer_id": f"cus_{order_id}", "name": "Priya Sharma",
                    "email": "priya@example.com"}  # fmt: skip
        dump["orders"].append({"order_id": order_id, "customer": customer,
                               "total_minor": amount, "currency": "INR", "note": ""})  # fmt: skip
        for suffix, at, hold in (("a", "09:58:02", False), ("b", "09:58:09", kind == "hold")):
            dump["payments"].append({
                "payment_id": f"pay_{order_id}_{suffix}", "order_id": order_id,
                "kind": "authorization" if hold else "capture",
                "status": "authorized" if hold else "captured", "amount_minor": amount,
                "currency": "INR", "created_at": f"2026-03-14T{at}Z"})  # fmt: skip
        if kind == "refunded":
            dump["refunds"].append({
                "refund_id": f"rf_old_{order_id}", "payment_id": f"pay_{order_id}_b",
                "amount_minor": amount, "currency": "INR", "status": "processing",
                "reason": "duplicate capture", "idempotency_key": f"earlier:{order_id}",
                "created_at": "2026-03-14T09:59:00Z"})  # fmt: skip
        self.ledger.load(WorldData.model_validate(dump))

    # -- what the HTTP transport serves ------------------------------------------------------

    def serve(self, request: Request) -> Response:
        try:
            found = match(request)
            if found.operation == "refunds.create":
                return self._create(request, found)
            if found.operation == "refunds.get_by_key":
                return self._by_key(request)
            self.system.read(found.operation)
            return found.route.handler(self.services, request, found.params)
        except SimError as exc:
            return Response.error(exc)
        except SystemRefused:
            return error(503, "unavailable", "the payments system is down")

    def _create(self, request: Request, found: Any) -> Response:
        key = request.headers.get("idempotency-key", "")
        body = json_body(request)
        args = {k: body.get(k) for k in ("payment_id", "amount_minor", "currency")}
        refusals: list[SimError] = []

        def apply() -> dict[str, Any]:
            try:
                created = found.route.handler(self.services, request, found.params)
            except SimError as exc:  # the contract's checks: 409, 422 (nothing applied)
                refusals.append(exc)
                raise SystemRefused("rejected") from exc
            return dict(created.body or {})

        try:
            refund = self.system.send(key, args, apply)
        except SystemRefused as exc:
            if refusals:
                return Response.error(refusals[0])
            if exc.code == "throttled":
                wait = str(int(exc.retry_after_s or 1))
                return error(429, "rate_limited", "slow down", **{"Retry-After": wait})
            if exc.code == "unavailable":
                raise Unreachable("payments") from exc
            return error(422, "refund_declined", "the payments system declined the refund")
        sent = [c for c in self.system.calls if c.kind == "send" and c.key == key]
        replayed = sent[-1].answer.startswith("replayed")
        return answer(200 if replayed else 201, refund,
                      **{"Idempotent-Replayed": "true" if replayed else "false"})  # fmt: skip

    def _by_key(self, request: Request) -> Response:
        key = (request.query.get("idempotency_key") or [""])[0]
        found = self.system.lookup(key)  # SystemRefused (failed): 503
        return answer(200, {"refunds": [] if found is None else [found]})

    # -- the policy, as stated ---------------------------------------------------------------

    def policy(self, task: TaskRow, args: dict[str, Any], levers: Levers) -> str:
        """POL-REF-004@4 on this scenario's orders: only the duplicate capture of the task's
        order, for its whole amount, in INR, and only if nothing refunded it before; at or
        above INR 1,000 a person approves, and every refund under the operator's autonomy
        cap (0: every effect)."""
        order_id = str(task.input.get("order_id"))
        kind = self.kinds.get(order_id)
        if kind not in ("duplicate", "duplicate_large"):
            return "deny"
        amount = AMOUNTS[kind]
        wanted = {"payment_id": f"pay_{order_id}_b", "amount_minor": amount, "currency": "INR"}
        if {k: args.get(k) for k in wanted} != wanted:
            return "deny"
        cap = levers.autonomy_minor
        if cap is not None and amount >= cap:
            return "needs_approval"
        return "needs_approval" if amount >= APPROVAL_AT_MINOR else "allow"


class RefundScenario:
    """`refund_resolution@3` against simulated payments (see the module docstring)."""

    effect_tool = "refunds.create"

    def __init__(self) -> None:
        self.payments: Payments | None = None
        self.policies: dict[str, PolicyOracle] = {"refund_resolution": self._policy}
        # The workflow records {"refund": what the system answered, "found_by", "replayed"}.
        self.unwrap: dict[str, Unwrap] = {"refund_resolution": lambda s: (s or {}).get("refund")}
        self.systems: list[SystemOfRecord] = []

    def install(self, world: World, registry: WorkflowRegistry) -> None:
        from agent_jobs.gateway import DEFAULT_ROUTE, ModelGateway, ScriptedProvider  # noqa: PLC0415
        from agent_jobs.tools import HmacCredentialProvider  # noqa: PLC0415
        from agent_jobs.tools.refund_tools import refund_registry  # noqa: PLC0415
        from agent_jobs.workflows.refund import RefundRules, RefundServices, RefundWorkflow  # noqa: PLC0415
        from agent_jobs.workflows.refund.wiring import systems_config  # noqa: PLC0415

        system = SystemOfRecord("refunds.create", world.choices, world.clock, world.calls, world)
        self.systems = [system]
        self.payments = Payments(system, world)
        http = session(self.payments.serve)
        services = RefundServices(
            gateway=ModelGateway([DEFAULT_ROUTE], {"scripted": ScriptedProvider(RefundRules())}),
            tools=refund_registry(systems_config(BASE_URL, {}), session=http),
            credentials=HmacCredentialProvider("sim-secret-" * 4),
            clock=lambda: world.clock.now().timestamp(),
            sleep=world.clock.advance,
            parallel_reads=False,
        )  # fmt: skip
        registry.register(RefundWorkflow(services))

    def _policy(self, task: TaskRow, args: dict[str, Any], levers: Levers) -> str:
        assert self.payments is not None
        return self.payments.policy(task, args, levers)

    def new_task(self, choices: Choices, n: int) -> tuple[str, dict[str, Any]]:
        assert self.payments is not None
        order_id = f"{8400 + n}"
        if order_id not in self.payments.kinds:
            self.payments.add(order_id, choices.weighted(KINDS))
        message = f"Order {order_id} was charged twice, please refund the extra charge."
        return "refund_resolution@3", {"message": message, "channel": "chat",
                                       "order_id": order_id}  # fmt: skip

    def applied(self) -> dict[str, Applied]:
        return {k: v for s in self.systems for k, v in s.applied.items()}

    def heal(self) -> None:
        for system in self.systems:
            system.faults = False
