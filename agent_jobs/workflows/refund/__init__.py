"""`refund_resolution@3`: the refund agent of seed 004, a deterministic workflow with bounded
model decision points (the model proposes reads, a refund or none, and the reply's wording; code
does policy, approval, execution, reconciliation and verification).

    from agent_jobs.workflows.refund import RefundWorkflow, scripted_services
    workflow = RefundWorkflow(scripted_services(sim.base_url))   # tests and evals
    workflow = RefundWorkflow()                                 # workers: from the environment
"""

from agent_jobs.workflows.refund.prompts import PROMPT_VERSION
from agent_jobs.workflows.refund.rules import Behaviour, RefundRules
from agent_jobs.workflows.refund.wiring import (
    MODEL_ROUTES,
    ROUTE_KEY,
    SYSTEMS_URL,
    RefundServices,
    scripted_services,
    services_from_env,
)
from agent_jobs.workflows.refund.workflow import NAME, TOOL_VERSIONS, VERSION, RefundWorkflow

WORKFLOW = f"{NAME}@{VERSION}"

__all__ = [
    "MODEL_ROUTES",
    "NAME",
    "PROMPT_VERSION",
    "ROUTE_KEY",
    "SYSTEMS_URL",
    "TOOL_VERSIONS",
    "VERSION",
    "WORKFLOW",
    "Behaviour",
    "RefundRules",
    "RefundServices",
    "RefundWorkflow",
    "scripted_services",
    "services_from_env",
]
