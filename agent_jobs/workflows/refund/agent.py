"""The refund agent, `refund_resolution@3`, declared on the agents surface (`agents.Declaration`).

Everything that says what the agent is lives here: its prompt and the route it is pinned to,
its tools at the versions tasks pin, its phases in order and the tools each may show the model,
its one effect (`refunds.create`, keyed by request and payment, reconciled through
`refunds.get_by_key`), its policy (each POL-REF-004 version as an `agents.Policy`, below: the
gate decides by it) and the claims a reply may make (each with its own check, which the
verifier runs). The workflow's hooks (`workflow.py`, `phases.py`) read it; `services_from_env`
holds the registered tools to it.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent_jobs.agents.declaration import Declaration, Phase
from agent_jobs.agents.declare import Effect
from agent_jobs.agents.facts import Facts
from agent_jobs.agents.policy import Autonomy, Call, Decision, Policy, approval_above, deny
from agent_jobs.gateway import DEFAULT_ROUTE_KEY
from agent_jobs.policy import LedgerFacts
from agent_jobs.policy.refund import (
    CURRENCY_NOT_COVERED,
    REFUND_TOOL,
    REFUND_TOOL_VERSIONS,
    RefundPolicy,
    RefundPolicyV3,
    RefundPolicyV4,
    ledger_denial,
)
from agent_jobs.verify.claims import (
    CheckedClaim,
    DuplicateCharge,
    NoRefund,
    PolicyCited,
    RefundSubmitted,
)
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
    """A POL-REF-004 version on the agents surface, the one the refund's gate decides by: its
    ledger checks as the rule, `refunds.create` at schema version 2 only, its approval
    thresholds per currency (at or above: INR 1,000 itself asks a person; a currency not listed
    asks too), its grant lifetime, and the operator's autonomy cap placed before the threshold.
    The reasons are the bundle's words, exactly (grants and audit rows carry them). The bundle
    (`agent_jobs.policy.refund`, which imports nothing above `core`) still serves the release
    manifest and scoring; a property test holds the two to the same decisions."""
    return Policy(
        bundle.version,
        rules=[ledger_rule],
        thresholds=[
            approval_above(
                bundle.approval_thresholds_minor,
                tools=[REFUND_TOOL],
                inclusive=True,
                reason="{policy}: >= {currency} {limit_major:,}",
                uncovered=CURRENCY_NOT_COVERED,
            )
        ],
        approval_ttl_s=bundle.approval_ttl_s,
        tool_versions={REFUND_TOOL: REFUND_TOOL_VERSIONS},
        # The operator's switch and the release flag (the lower of the two, `autonomy_minor`).
        autonomy=Autonomy(
            inclusive=True,
            before_limits=True,
            reason="operator autonomy threshold: >= {cap} minor units",
        ),
    )


POL_REF_004_V4 = declared_policy(RefundPolicyV4)
POL_REF_004_V3 = declared_policy(RefundPolicyV3)

# The claims a reply may make; each checks itself (`CheckedClaim.check`) and the verifier parses
# a draft's claims as these classes and runs their checks.
CLAIMS: tuple[type[CheckedClaim], ...] = (DuplicateCharge, RefundSubmitted, PolicyCited, NoRefund)


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
    # investigate -> policy -> decide -> (gate, approval, effect) -> confirm -> draft -> verify:
    # the task's phases (its state's `phase`), the model deciding in four of them.
    order=("investigate", "policy", "decide", "confirm", "draft", "verify"),
    phases=(
        Phase(
            "investigate",
            ("orders.get", "payments.list", "refunds.list"),
            STEPS["investigate"],
        ),
        Phase(
            "retrieve_policy",
            ("policy.search", "policy.get"),
            STEPS["retrieve_policy"],
            at="policy",
        ),
        Phase("decide", ("refunds.create", "refunds.list"), STEPS["decide"]),
        Phase("draft_reply", (), STEPS["draft_reply"], at="draft"),
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
    policies=(POL_REF_004_V3,),
    claims=CLAIMS,
)
REFUND_EFFECT = REFUND.effect("refunds.create")
