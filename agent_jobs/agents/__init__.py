"""Write your own agent: declare its tools, effects, policy, model and claims; the orchestrator
runs it with everything it gives every workflow (see `agent.py` and the README chapter "Write
your own agent")."""

from agent_jobs.agents.agent import Agent
from agent_jobs.agents.claims import Claim
from agent_jobs.agents.declaration import Declaration, Phase
from agent_jobs.agents.declare import Effect
from agent_jobs.agents.facts import Facts
from agent_jobs.agents.openapi import OpenApiTools, Operation, openapi_tools
from agent_jobs.agents.policy import (
    Autonomy,
    Call,
    Decision,
    Policy,
    Rule,
    Threshold,
    allow,
    approval_above,
    deny,
    needs_approval,
)
from agent_jobs.agents.services import AgentServices
from agent_jobs.tools.adapter import ServiceRejected as ToolRejected
from agent_jobs.tools.adapter import ServiceThrottled as ToolThrottled

__all__ = [
    "Agent",
    "AgentServices",
    "Autonomy",
    "Call",
    "Claim",
    "Decision",
    "Declaration",
    "Effect",
    "Facts",
    "OpenApiTools",
    "Operation",
    "Phase",
    "Policy",
    "Rule",
    "Threshold",
    "ToolRejected",
    "ToolThrottled",
    "allow",
    "approval_above",
    "deny",
    "needs_approval",
    "openapi_tools",
]
