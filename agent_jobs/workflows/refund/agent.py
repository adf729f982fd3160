"""The refund agent, `refund_resolution@3`, declared on the agents surface (`agents.Declaration`).

Everything that says what the agent is lives here: its prompt and the route it is pinned to,
its tools at the versions tasks pin, the phases and the tools each may show the model, its one
effect (`refunds.create`, keyed by request and payment, reconciled through
`refunds.get_by_key`), its policy (each POL-REF-004 version as an `agents.Policy`, below) and
the claims a reply may make (checked by `agent_jobs.verify`). The workflow's hooks (`workflow.py`,
`phases.py`) read it; `services_from_env` holds the registered tools to it.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent_jobs.agents.declaration import Declaration, Phase
from agent_jobs.agents.declare import Effect
from agent_jobs.agents.facts import Facts
from agent_jobs.agents.policy import Call, Decision, Policy, approval_above, deny
from agent_jobs.gateway import DEFAULT_ROUTE_KEY
from agent_jobs.policy import LedgerFacts
from agent_jobs.policy.refund import (
    REFUND_TOOL,
    RefundPolicy,
    RefundPolicyV3,
    RefundPolicyV4,
    ledger_denial,
)
from agent_jobs.verify.claims import DuplicateCharge, NoRefund, PolicyCited, RefundSubmitted
from agent_jobs.workflows.refund.prompts import PROMPT_VERSION, STEPS, SYSTEM


def ledger_rule(call: Call, facts: Facts) -> Decision | None:
    """POL-REF-004's ledger checks as an `agents.Policy` rule: the ledger is built from the
    task's recorded reads and effects (`LedgerFacts.from_observations`), never model text."""
    if call.tool != REFUND_TOOL:
        return None
    observed = [
        (str(f.get("tool")), f["result"])
        for f in (*facts.reads, *facts.effects)
        if isinstance(f.get("result"), Mapping)
    ]
    reason = ledger_denial(call.args, LedgerFacts.from_observations(observed))
    return deny(reason) if reason else None


def declared_policy(bundle: type[RefundPolicy]) -> Policy:
    """A POL-REF-004 version on the agents surface: its ledger checks as the rule, its approval
    thresholds per currency (at or above: INR 1,000 itself asks a person), its grant lifetime.
    The bundle stays the trusted evaluator (`agent_jobs.policy` imports nothing above `core`)
    and adds the pinned tool version and the operator's autonomy cap; a property test holds
    the two to the same decisions."""
    return Policy(
        bundle.version,
        rules=[ledger_rule],
        thresholds=[
            approval_above(bundle.approval_thresholds_minor, tools=[REFUND_TOOL], inclusive=True)
        ],
        approval_ttl_s=bundle.approval_ttl_s,
    )


POL_REF_004_V4 = declared_policy(RefundPolicyV4)
POL_REF_004_V3 = declared_policy(RefundPolicyV3)

REFUND = Declaration(
    name="refund_resolution",
    version=3,
    prompt=SYSTEM,
    prompt_version=PROMPT_VERSION,
    # support-tier2@2026-03: the built-in route, served by the refund's scripted model.
    model_route=DEFAULT_ROUTE_KEY,
    # Tool schema versions a task is pinned to (as the registry of this release ships them).
    tools={
        "orders.get": "1",
        "payments.list": "1",
        "refunds.list": "1",
        "policy.search": "1",
        "policy.get": "1",
        "refunds.get_by_key": "1",
        "refunds.create": "2",
    },
    phases=(
        Phase(
            "investigate",
            ("orders.get", "payments.list", "refunds.list"),
            STEPS["investigate"],
        ),
        Phase("retrieve_policy", ("policy.search", "policy.get"), STEPS["retrieve_policy"]),
        Phase("decide", ("refunds.create", "refunds.list"), STEPS["decide"]),
        Phase("draft_reply", (), STEPS["draft_reply"]),
    ),
    effects=(
        Effect(
            "refunds.create",
            lookup="refunds.get_by_key",
            lookup_arg="idempotency_key",
            key="refund:{request_id}:{payment_id}",
        ),
    ),
    policy=POL_REF_004_V4,
    claims=(DuplicateCharge, RefundSubmitted, PolicyCited, NoRefund),
)
REFUND_EFFECT = REFUND.effect("refunds.create")
