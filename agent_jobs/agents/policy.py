"""An agent's policy: rules over facts that allow, deny or ask a person, and thresholds per
currency above which an effect needs approval.

Pure and deterministic (no I/O, no clock): the orchestrator evaluates it when the model proposes
an effect and again when a grant is used, and the two must agree. Evaluation order:

1. an effect tool the agent does not declare: deny (`unknown_tool`);
2. each rule in order: the first `deny` wins outright; a `needs_approval` is remembered;
3. the threshold: the effect's amount in its currency above the currency's threshold, or a
   currency with no threshold (fail closed), needs approval;
4. otherwise allow.

A rule is `rule(call, facts) -> Decision | None` (None: no opinion). It reads the proposed call's
arguments and the task's `Facts`; it must never trust a figure the model wrote that the facts
can check.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_jobs.agents.facts import Facts
from agent_jobs.core.errors import ConfigError

_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}@[0-9]{1,6}$")
DEFAULT_APPROVAL_TTL_S = 1800.0


@dataclass(frozen=True)
class Call:
    """The effect a model proposed, as a rule sees it."""

    tool: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Decision:
    """What a rule (or the policy) decided. Build with `allow()`, `deny()`, `needs_approval()`."""

    kind: Literal["allow", "deny", "needs_approval"]
    reason: str = ""


def allow(reason: str = "") -> Decision:
    return Decision("allow", reason)


def deny(reason: str) -> Decision:
    """Refuse the effect; `reason` is a short code the model and the audit log see."""
    return Decision("deny", reason)


def needs_approval(reason: str) -> Decision:
    """Let the effect run only with a person's grant, bound to its exact arguments."""
    return Decision("needs_approval", reason)


Rule = Callable[[Call, Facts], Decision | None]


@dataclass(frozen=True)
class Threshold:
    """Above `above[currency]` (minor units) of the argument `amount`, an effect of `tools`
    (all effects when empty) needs approval; a currency not listed always does. `inclusive`:
    at or above (a policy worded "INR 1,000 or more")."""

    above: Mapping[str, int]
    amount: str = "amount_minor"
    currency: str = "currency"
    tools: frozenset[str] = frozenset()
    inclusive: bool = False

    def applies(self, call: Call) -> bool:
        return not self.tools or call.tool in self.tools

    def limit(self, currency: str) -> int | None:
        """The limit in `currency`, or None: not covered, so every amount asks a person."""
        return self.above.get(currency)

    def exceeded(self, amount: int, limit: int) -> bool:
        return amount >= limit if self.inclusive else amount > limit

    def decide(self, call: Call) -> Decision | None:
        amount = call.args.get(self.amount)
        currency = call.args.get(self.currency)
        if isinstance(amount, bool) or not isinstance(amount, int):
            return needs_approval(f"no integer {self.amount} to compare with a threshold")
        limit = self.limit(str(currency))
        if limit is None:
            return needs_approval(f"no threshold for currency {str(currency)[:8]!r}")
        if self.exceeded(amount, limit):
            word = "at or above" if self.inclusive else "above"
            return needs_approval(f"{self.amount} {amount} {currency} {word} {limit}")
        return None


@dataclass(frozen=True)
class Policy:
    """A versioned policy (`NAME@n`): a grant is valid only under the version it was given
    under, so bump the version when a rule or threshold changes meaning."""

    version: str
    rules: Sequence[Rule] = ()
    thresholds: Sequence[Threshold] = ()
    approval_ttl_s: float = DEFAULT_APPROVAL_TTL_S

    def __post_init__(self) -> None:
        if not _VERSION.match(self.version):
            raise ConfigError(f"policy version {self.version[:70]!r} is not NAME@n")
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "thresholds", tuple(self.thresholds))
        if not 0 < self.approval_ttl_s <= 30 * 86400:
            raise ConfigError("policy approval_ttl_s must be within (0, 30 days]")

    def evaluate(self, call: Call, facts: Facts, effects: frozenset[str]) -> Decision:
        """Decide on one proposed effect (see the module docstring for the order)."""
        if call.tool not in effects:
            return deny("unknown_tool")
        asked: Decision | None = None
        for rule in self.rules:
            said = rule(call, facts)
            if said is None or said.kind == "allow":
                continue
            if said.kind == "deny":
                return said
            asked = asked or said
        if asked is not None:
            return asked
        for threshold in self.thresholds:
            if threshold.applies(call):
                said = threshold.decide(call)
                if said is not None:
                    return said
        return allow()


def approval_above(
    above: Mapping[str, int],
    *,
    amount: str = "amount_minor",
    currency: str = "currency",
    tools: Sequence[str] = (),
    inclusive: bool = False,
) -> Threshold:
    """`Threshold` for `tools` (every effect when empty): `approval_above({"EUR": 10000})` asks
    above EUR 100.00; with `inclusive=True`, at EUR 100.00 too."""
    for code, limit in above.items():
        if not re.fullmatch(r"[A-Z]{3}", code) or isinstance(limit, bool) or limit < 0:
            raise ConfigError(f"threshold {code!r}: a 3-letter currency and a limit >= 0")
    return Threshold(dict(above), amount, currency, frozenset(tools), inclusive)
