"""A simulated agent that applies two effects in one task (`Agent(max_effects=2)`): an IT
helpdesk agent disables a lost laptop in device management, then orders its replacement from
procurement (above EUR 1,000 a person approves). Two systems of record, each faulty as the
schedule draws, so the second effect meets every fault the first does: throttles, refusals,
timeouts before and after applying, lag, a worker dying mid-call, a lever, a cancel or a
person's denial between the two. Half the tasks have the model propose both effects in one
answer (a plan: the second sent once the first is applied, without a model call).

Its policy is stated twice, as for every scenario: in the agent's own rules and thresholds,
and apart from them in `laptop_policy`, which the oracle holds every send to (it reads the
scenario's own device table and what the device system actually applied, never the task).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent_jobs.agents import (
    Agent,
    Call,
    Claim,
    Decision,
    Facts,
    Policy,
    ToolRejected,
    ToolThrottled,
    approval_above,
    deny,
)
from agent_jobs.gateway import ModelRequest
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.oracle import Levers, PolicyOracle, Unwrap
from agent_jobs.simulation.systems import Applied, SystemOfRecord, SystemRefused, SystemTimeout
from agent_jobs.store import TaskRow

if TYPE_CHECKING:
    from agent_jobs.simulation.world import World

DISABLE = "devices.disable"
ORDER = "orders.create"
APPROVAL_ABOVE_MINOR = 100_000
# The devices a task may be about: a cheap laptop, one above the approval limit, one retired.
KINDS = (("active", 90_000), ("active", 180_000), ("retired", 60_000))


class Fleet:
    """Device management and procurement, each a simulated system of record."""

    def __init__(self, devices: SystemOfRecord, orders: SystemOfRecord) -> None:
        self.devices = devices
        self.orders = orders
        # device id -> (status when the task was submitted, replacement price); never changed,
        # so the oracle's policy reads what the agent's rules read.
        self.known: dict[str, tuple[str, int]] = {}

    def get(self, device_id: str) -> dict[str, Any]:
        try:
            self.devices.read(device_id)
        except SystemRefused as exc:
            raise ToolRejected("unavailable", "device management is down", transient=True) from exc
        found = self.known.get(device_id)
        if found is None:
            raise ToolRejected("device_not_found", f"no device {device_id}")
        return {"device_id": device_id, "status": found[0], "replacement_minor": found[1],
                "currency": "EUR"}  # fmt: skip

    def disable_applied(self, device_id: str, key: str) -> dict[str, Any]:
        """Device management's disable, as the system answers it (its failures raised)."""

        def apply() -> dict[str, Any]:
            if self.known.get(device_id, ("", 0))[0] != "active":
                raise SystemRefused("rejected")
            return {"device_id": device_id, "state": "disabled"}

        return self.devices.send(key, {"device_id": device_id}, apply)

    def order_applied(
        self, device_id: str, price_minor: int, currency: str, key: str
    ) -> dict[str, Any]:
        """Procurement's order, as the system answers it (its failures raised)."""
        args = {"device_id": device_id, "price_minor": price_minor, "currency": currency}

        def apply() -> dict[str, Any]:
            number = len(self.orders.applied) + 501
            return {"order_id": f"po_{number}", **args}

        return self.orders.send(key, args, apply)

    def disable(self, device_id: str, key: str) -> dict[str, Any]:
        return _sent(self.devices, lambda: self.disable_applied(device_id, key))

    def order(self, device_id: str, price_minor: int, currency: str, key: str) -> dict[str, Any]:
        return _sent(self.orders, lambda: self.order_applied(device_id, price_minor, currency, key))

    def found(self, system: SystemOfRecord, key: str) -> dict[str, Any] | None:
        try:
            return system.lookup(key)
        except SystemRefused as exc:
            raise ConnectionError(f"{system.name} is down") from exc


def _sent(system: SystemOfRecord, send: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A send's failures as a Python tool's (`ToolThrottled`, `ToolRejected`, a timeout)."""
    try:
        return send()
    except SystemRefused as exc:
        if exc.code == "throttled":
            raise ToolThrottled("busy", retry_after_s=exc.retry_after_s) from exc
        if exc.code == "unavailable":
            raise ToolRejected("unavailable", f"{system.name} is down", transient=True) from exc
        raise ToolRejected("refused", f"{system.name} refused it") from exc
    except SystemTimeout as exc:
        raise TimeoutError(str(exc)) from exc


class LostLaptop(BaseModel):
    device_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    # The model proposes both effects in one answer (a plan) instead of one after the other.
    plan: bool = False


def _calls(tool: str, **args: Any) -> dict[str, Any]:
    return {"kind": "tool_calls", "calls": [{"tool": tool, "args": args}], "rationale": ""}


def scripted_model(request: ModelRequest) -> dict[str, Any]:
    """Read the device, disable it, then order its replacement; told no, say what was done."""
    facts = request.facts
    device_id = facts["input"]["device_id"]
    done = {e["tool"] for e in facts["effects"]}
    stopped = [n for n in facts["notes"] if " applied (" not in str(n)]
    reads = [r["result"] for r in facts["reads"] if r["tool"] == "devices.get"]
    if not reads and not stopped:
        return _calls("devices.get", device_id=device_id)
    if ORDER in done or stopped or not reads or reads[-1]["status"] != "active":
        claims = [
            {"type": "disabled" if DISABLE in done else "not_disabled", "device_id": device_id},
            {"type": "ordered" if ORDER in done else "not_ordered", "device_id": device_id},
        ]
        return {"kind": "final_draft", "draft": {"text": "Done what could be.", "claims": claims}}
    order = {"tool": ORDER, "args": {"device_id": device_id, "currency": "EUR",
                                      "price_minor": reads[-1]["replacement_minor"]}}  # fmt: skip
    if DISABLE not in done and facts["input"].get("plan"):
        calls = [{"tool": DISABLE, "args": {"device_id": device_id}}, order]
        return {"kind": "tool_calls", "calls": calls, "rationale": ""}
    if DISABLE not in done:
        return _calls(DISABLE, device_id=device_id)
    return _calls(ORDER, device_id=device_id, price_minor=reads[-1]["replacement_minor"],
                  currency="EUR")  # fmt: skip


def laptop_agent(
    fleet: Fleet, sources: Callable[[Agent], None] | None = None, *, approve_plan: bool = False
) -> Agent:
    """The agent, its tools Python functions over `fleet`, or those `sources` declares on it
    (`tool_sources`: OpenAPI and MCP) under the same names. `approve_plan`: a plan that needs a
    person is one approval of both effects; its rule then leaves "disabled before ordered" to
    the plan's order (an order is proposed beside the disable), which the oracle still holds
    the sends to."""
    agent = Agent(
        "lost_laptop",
        input=LostLaptop,
        prompt="Disable the lost laptop, then order its replacement; reply with claims.",
        policy=Policy("LOST-LAPTOP@1", thresholds=[approval_above(
            {"EUR": APPROVAL_ABOVE_MINOR}, amount="price_minor", tools=[ORDER])]),
        scripted_model=scripted_model,
        max_effects=2,
        approve_plan=approve_plan,
    )  # fmt: skip

    if sources is not None:
        sources(agent)
    else:
        _python_tools(agent, fleet)

    @agent.rule
    def active_then_disabled_then_its_price(call: Call, facts: Facts) -> Decision | None:
        device = facts.read("devices.get", device_id=call.args["device_id"])
        if device is None or device["status"] != "active":
            return deny("device_not_active")
        disabled = facts.effect(DISABLE, device_id=call.args["device_id"]) is not None
        if call.tool == ORDER and not disabled and not approve_plan:
            return deny("device_not_disabled")
        if call.tool == ORDER and call.args["price_minor"] != device["replacement_minor"]:
            return deny("not_the_replacement_price")
        return None

    for kind, effect in (("disabled", DISABLE), ("ordered", ORDER)):
        agent.claim(_claim(kind, effect, done=True))
        agent.claim(_claim(f"not_{kind}", effect, done=False))
    return agent


def _python_tools(agent: Agent, fleet: Fleet) -> None:
    @agent.tool("devices.get")
    def get_device(device_id: str) -> dict[str, Any]:
        """Read one device."""
        return fleet.get(device_id)

    @agent.effect(DISABLE, key="disable:{tenant_id}:{device_id}",
                  lookup=lambda key: fleet.found(fleet.devices, key))  # fmt: skip
    def disable(device_id: str, idempotency_key: str) -> dict[str, Any]:
        """Disable a device."""
        return fleet.disable(device_id, idempotency_key)

    @agent.effect(ORDER, key="replace:{tenant_id}:{device_id}",
                  lookup=lambda key: fleet.found(fleet.orders, key))  # fmt: skip
    def order(
        device_id: str, price_minor: int, currency: str, idempotency_key: str
    ) -> dict[str, Any]:
        """Order the replacement of a device."""
        return fleet.order(device_id, price_minor, currency, idempotency_key)


def _claim(kind: str, effect: str, *, done: bool) -> type[Claim]:
    class Said(Claim):
        device_id: str

        def holds(self, facts: Facts) -> bool:
            asked = facts.input["device_id"] == self.device_id
            return asked and (facts.effect(effect, device_id=self.device_id) is not None) == done

    name = "".join(w.capitalize() for w in kind.split("_"))
    Said.__name__ = Said.__qualname__ = name
    return Said


class TwoEffectsScenario:
    """The lost-laptop agent: two effects per task, on two faulty systems of record."""

    effect_tool = ORDER  # the one an operator's tool lever disables: the second
    sources = False  # True: its tools from OpenAPI and MCP (`tool_sources`)

    def __init__(self) -> None:
        self.fleet: Fleet | None = None
        self.policies: dict[str, PolicyOracle] = {"lost_laptop": self.laptop_policy}
        self.unwrap: dict[str, Unwrap] = {"lost_laptop": lambda s: (s or {}).get("result")}
        self.systems: list[SystemOfRecord] = []

    def install(self, world: World, registry: WorkflowRegistry) -> None:
        from agent_jobs.testing import ScriptedModel  # noqa: PLC0415
        from agent_jobs.tools import HmacCredentialProvider  # noqa: PLC0415

        self.systems = [SystemOfRecord(name, world.choices, world.clock, world.calls, world)
                        for name in (DISABLE, ORDER)]  # fmt: skip
        self.fleet = fleet = Fleet(*self.systems)
        sources = None
        if self.sources:
            from agent_jobs.simulation.tool_sources import declare_sources  # noqa: PLC0415

            sources = lambda agent: declare_sources(agent, fleet, world)  # noqa: E731
        # Every other pair of seeds, one approval for the whole plan (`approve_plan`): a group
        # of grants, each bound to its action's hash and used at its own turn. From the seed,
        # not drawn, so the other seeds' schedules stay as they were.
        agent = laptop_agent(fleet, sources, approve_plan=world.seed % 4 >= 2)
        model = ScriptedModel(rules=agent.scripted_model)
        agent.use(gateway=model.gateway(), credentials=HmacCredentialProvider("sim-secret-" * 4))
        registry.register(agent)

    def laptop_policy(self, task: TaskRow, args: dict[str, Any], levers: Levers) -> str:
        assert self.fleet is not None
        return laptop_policy(self.fleet, args, levers)

    def new_task(self, choices: Choices, n: int) -> tuple[str, dict[str, Any]]:
        assert self.fleet is not None
        device_id = f"LT-{n}"
        self.fleet.known[device_id] = KINDS[choices.draw(len(KINDS))]
        return "lost_laptop@1", {"device_id": device_id, "plan": choices.chance(50)}

    def applied(self) -> dict[str, Applied]:
        return {k: v for s in self.systems for k, v in s.applied.items()}

    def heal(self) -> None:
        for system in self.systems:
            system.faults = False


def laptop_policy(fleet: Fleet, args: dict[str, Any], levers: Levers) -> str:
    """The lost-laptop policy as stated: only an active device is disabled; its replacement is
    ordered only once device management has disabled it, at its replacement price; above EUR
    1,000 a person approves the order. Under the operator's autonomy cap a person approves
    what has no amount (the disable) and an order over the cap (0: every effect)."""
    status, price = fleet.known.get(str(args.get("device_id")), ("", 0))
    if status != "active":
        return "deny"
    cap = levers.autonomy_minor
    if "price_minor" not in args:
        return "allow" if cap is None else "needs_approval"
    off = {"device_id": args["device_id"]}
    disabled = any(a.args == off for a in fleet.devices.applied.values())
    if not disabled or args["price_minor"] != price:
        return "deny"
    amount = int(args["price_minor"])
    if cap is not None and (cap == 0 or amount > cap):
        return "needs_approval"
    return "needs_approval" if amount > APPROVAL_ABOVE_MINOR else "allow"
