"""Policy bundles and approval grants: trusted, deterministic code.

Nothing here can call a model, a tool or the network: a decision is a pure function of the proposed
call and the ledger facts, so it can be re-run identically when a grant is revalidated.
"""

from agent_jobs.policy.approvals import (
    Grant,
    GrantCheck,
    GrantFailure,
    check_approver,
    validate_grant,
)
from agent_jobs.policy.bundles import CURRENT, UnknownPolicyVersion, get_bundle, known_versions
from agent_jobs.policy.decisions import (
    Allow,
    Deny,
    NeedsApproval,
    PolicyBundle,
    PolicyDecision,
    ProposedCall,
    allow,
    deny,
    needs_approval,
)
from agent_jobs.policy.facts import (
    LedgerFacts,
    OrderFact,
    PaymentFact,
    RefundFact,
    instant,
    payment_order_key,
)
from agent_jobs.policy.refund import RefundPolicy, RefundPolicyV3, RefundPolicyV4

__all__ = [
    "CURRENT",
    "Allow",
    "Deny",
    "Grant",
    "GrantCheck",
    "GrantFailure",
    "LedgerFacts",
    "NeedsApproval",
    "OrderFact",
    "PaymentFact",
    "PolicyBundle",
    "PolicyDecision",
    "ProposedCall",
    "RefundFact",
    "RefundPolicy",
    "RefundPolicyV3",
    "RefundPolicyV4",
    "UnknownPolicyVersion",
    "allow",
    "check_approver",
    "deny",
    "get_bundle",
    "instant",
    "known_versions",
    "needs_approval",
    "payment_order_key",
    "validate_grant",
]
