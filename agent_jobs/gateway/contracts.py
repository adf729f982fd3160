"""What crosses the gateway boundary: requests, results, usage and call records.

Money is a `Decimal` in INR, serialised as a string (`model_dump(mode="json")`), so a task's
usage survives a round trip through its JSON state without float drift.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_jobs.core.identity import check_tenant_id
from agent_jobs.gateway.schemas import PROPOSAL_V3

__all__ = [
    "PROPOSAL_V3",
    "CallRecord",
    "Message",
    "ModelRequest",
    "ModelResult",
    "TaskUsage",
    "Timeouts",
    "ToolSpec",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolSpec(_Frozen):
    """A tool the model may propose: `parameters` is the JSON Schema of its arguments."""

    name: str = Field(min_length=1, max_length=128)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class Message(_Frozen):
    """One chat message. `tool` messages carry an observation; `name` says which tool."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: str | None = None


class TaskUsage(_Frozen):
    """A task's model usage so far. The caller persists it in the task's state and passes it
    back on the next call; budgets are checked against it."""

    calls: int = Field(default=0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    cost: Decimal = Field(default=Decimal(0), ge=0, description="INR")

    def plus(self, call: CallRecord) -> TaskUsage:
        """This usage with one more (billed) call added."""
        return TaskUsage(
            calls=self.calls + 1,
            input_tokens=self.input_tokens + call.input_tokens,
            output_tokens=self.output_tokens + call.output_tokens,
            cached_input_tokens=self.cached_input_tokens + call.cached_input_tokens,
            cost=self.cost + call.cost,
        )


class Timeouts(_Frozen):
    """Per-call limits: `connect_s` to open the connection, `total_s` for the whole answer."""

    connect_s: float = Field(gt=0)
    total_s: float = Field(gt=0)


class CallRecord(_Frozen):
    """One provider call that returned a response (and so was billed).

    Only the token counts are needed to price a call with `costmodel.price_usage`; the rest is
    what a trace records about it.
    """

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    provider: str = ""
    model: str = ""
    purpose: Literal["propose", "repair"] = "propose"
    fallback: bool = False
    # False when the provider reported no usage and the counts are the gateway's estimate.
    tokens_reported: bool = True
    cost: Decimal = Field(default=Decimal(0), ge=0)
    latency_ms: int = Field(default=0, ge=0)


class ModelRequest(_Frozen):
    """One inference request from a workflow step.

    `facts` is the verified, structured state of the task. Only the scripted provider reads it
    (to decide deterministically); a real provider sees `messages`, `tools` and the schema only.
    `output_schema` overrides the route's schema when given.
    """

    tenant_id: str
    task_id: str = Field(min_length=1)
    step_type: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    usage: TaskUsage = Field(default_factory=TaskUsage)
    facts: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tenant_id")
    @classmethod
    def _tenant(cls, v: str) -> str:
        return check_tenant_id(v)

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, v: list[ToolSpec]) -> list[ToolSpec]:
        names = [t.name for t in v]
        if len(names) != len(set(names)):
            raise ValueError("tool names must be unique")
        return v


class ModelResult(_Frozen):
    """A validated proposal and what it cost.

    Token counts and cost cover every billed call of this request (the repair call included);
    `usage_after` is `request.usage` plus those calls, to persist. `latency_ms` is the whole
    request on the gateway's clock (failed primary, fallback and repair included); `calls` has
    each billed call's own figures. `provider`/`model` name what produced the proposal, so a
    quality dip after a fallback can be traced to it.
    """

    proposal: dict[str, Any]
    route: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost: Decimal
    latency_ms: int
    repaired: bool
    fallback: bool
    usage_after: TaskUsage
    calls: tuple[CallRecord, ...] = ()
