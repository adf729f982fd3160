"""Claims: what an agent's reply asserts, each checked against the task's facts before anyone
reads the reply.

Declare a claim as a pydantic model with a `holds(facts)` method; the model lists its claims
with its draft (`{"type": "order_cancelled", "order_id": "A-1", ...}`), each is parsed into its
class and must hold, or the draft goes back to the model once, then to a person. A reply with
no claim at all fails too (`no_claims`): a reply that asserts nothing checkable is not verified.

    class OrderCancelled(Claim):
        '''The order is cancelled.'''
        order_id: str

        def holds(self, facts: Facts) -> bool:
            return facts.effect("orders.cancel", order_id=self.order_id) is not None
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from agent_jobs.agents.facts import Facts
from agent_jobs.core.errors import ConfigError

MAX_CLAIMS = 20


class Claim(BaseModel):
    """Base of an agent's claims. `type` is the snake_case class name unless set."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type_name: ClassVar[str] = ""

    @abstractmethod
    def holds(self, facts: Facts) -> bool:
        """Whether the facts show this claim true. Subclasses must say."""

    @classmethod
    def claim_type(cls) -> str:
        return cls.type_name or re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def claim_schema(cls: type[Claim]) -> dict[str, Any]:
    """The JSON schema of one claim, as the model's output schema lists it."""
    schema = cls.model_json_schema()
    props = {
        k: {x: y for x, y in v.items() if x != "title"} for k, v in schema["properties"].items()
    }
    if "$defs" in schema:
        raise ConfigError(f"claim {cls.__name__}: fields must be plain JSON types, not models")
    return {
        "type": "object",
        "properties": {"type": {"const": cls.claim_type()}, **props},
        "required": ["type", *schema.get("required", [])],
        "additionalProperties": False,
    }


def check_claims(
    classes: Mapping[str, type[Claim]], raw: Iterable[Any], facts: Facts
) -> tuple[list[Claim], list[str]]:
    """Parse and check every claim; returns the claims and the failures (empty: verified)."""
    items = list(raw)
    if not items:
        return [], ["no_claims"]
    if len(items) > MAX_CLAIMS:
        return [], ["too_many_claims"]
    claims: list[Claim] = []
    failures: list[str] = []
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, Mapping) else None
        cls = classes.get(kind) if isinstance(kind, str) else None
        if cls is None:
            failures.append(f"claim_{i}_unknown_type")
            continue
        try:
            claim = cls.model_validate({k: v for k, v in item.items() if k != "type"})
        except ValidationError:
            failures.append(f"claim_{i}_malformed_{kind}")
            continue
        try:
            ok = claim.holds(facts)
        except Exception:  # a claim's check that raises has not shown it true
            ok = False
        if not ok:
            failures.append(f"claim_{i}_{kind}_not_shown_by_facts")
        claims.append(claim)
    return claims, failures
