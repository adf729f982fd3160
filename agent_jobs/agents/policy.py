"""An agent's policy: rules over facts that allow, deny or ask a person, and thresholds per
currency above which an effect needs approval.

Pure and deterministic (no I/O, no clock): the orchestrator evaluates it when the model proposes
an effect and again when a grant is used, and the two must agree. Evaluation order:

1. an effect tool the agent does not declare, or a call at a schema version the policy was not
   written for (`tool_versions`): deny (`unknown_tool`);
2. each rule in order: the first `deny` wins outright; a `needs_approval` is remembered;
3. the threshold: the effect's amount in its currency above the currency's threshold, or a
   currency with no threshold (fail closed), needs approval;
4. otherwise allow.

The operator's autonomy lever (`autonomy_minor`, 0 in an incident) sends to a person what the
policy would let run: by default once the policy allows (`Autonomy()`), or, with
`Autonomy(before_limits=True)`, after the uncovered-currency check and before the limits, so its
reason is the one given. It only ever lowers the bar, never raises a threshold.

A rule is `rule(call, facts) -> Decision | None` (None: no opinion). It reads the proposed call's
arguments and the task's `Facts`; it must never trust a figure the model wrote that the facts
can check.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
    # The tool's schema version, when the caller knows it (checked against `tool_versions`).
    version: str | None = None


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
    at or above (a policy worded "INR 1,000 or more"). `reason` and `uncovered`, when set, are
    the reasons given (format fields: `policy`, `amount`, `currency`, `limit`, `limit_major`);
    an existing policy keeps the exact wording its grants and audit log were recorded with."""

    above: Mapping[str, int]
    amount: str = "amount_minor"
    currency: str = "currency"
    tools: frozenset[str] = frozenset()
    inclusive: bool = False
    reason: str = ""
    uncovered: str = ""

    def applies(self, call: Call) -> bool:
        return not self.tools or call.tool in self.tools

    def limit(self, currency: str) -> int | None:
        """The limit in `currency`, or None: not covered, so every amount asks a person."""
        return self.above.get(currency)

    def exceeded(self, amount: int, limit: int) -> bool:
        return amount >= limit if self.inclusive else amount > limit

    def precheck(self, call: Call, policy: str = "") -> Decision | None:
        """Approval before any limit is compared: no integer amount, or a currency not covered."""
        amount = call.args.get(self.amount)
        currency = call.args.get(self.currency)
        if isinstance(amount, bool) or not isinstance(amount, int):
            return needs_approval(f"no integer {self.amount} to compare with a threshold")
        if self.limit(str(currency)) is None:
            if self.uncovered:
                return needs_approval(self._format(self.uncovered, policy, amount, currency, 0))
            return needs_approval(f"no threshold for currency {str(currency)[:8]!r}")
        return None

    def over(self, call: Call, policy: str = "") -> Decision | None:
        """Approval when the amount is over the limit (after `precheck` found both)."""
        amount = call.args[self.amount]
        currency = call.args.get(self.currency)
        limit = self.limit(str(currency))
        assert limit is not None  # precheck asked otherwise
        if not self.exceeded(amount, limit):
            return None
        if self.reason:
            return needs_approval(self._format(self.reason, policy, amount, currency, limit))
        word = "at or above" if self.inclusive else "above"
        return needs_approval(f"{self.amount} {amount} {currency} {word} {limit}")

    def decide(self, call: Call, policy: str = "") -> Decision | None:
        return self.precheck(call, policy) or self.over(call, policy)

    @staticmethod
    def _format(template: str, policy: str, amount: int, currency: Any, limit: int) -> str:
        return template.format(
            policy=policy, amount=amount, currency=currency, limit=limit, limit_major=limit // 100
        )


@dataclass(frozen=True)
class Autonomy:
    """Where and how the operator's autonomy cap applies (see the module docstring). The cap
    asks a person when it is 0, when the effect has no integer amount, or when the amount is
    over it (`inclusive`: at it too); `reason` formats `cap`."""

    inclusive: bool = False
    before_limits: bool = False
    reason: str = "operator autonomy cap {cap}"

    def decide(self, amount: Any, cap: int | None) -> Decision | None:
        if cap is None:
            return None
        if isinstance(amount, bool) or not isinstance(amount, int):
            return needs_approval(self.reason.format(cap=cap))
        over = amount >= cap if self.inclusive else amount > cap
        if cap == 0 or over:
            return needs_approval(self.reason.format(cap=cap))
        return None


@dataclass(frozen=True)
class Policy:
    """A versioned policy (`NAME@n`): a grant is valid only under the version it was given
    under, so bump the version when a rule or threshold changes meaning."""

    version: str
    rules: Sequence[Rule] = ()
    thresholds: Sequence[Threshold] = ()
    approval_ttl_s: float = DEFAULT_APPROVAL_TTL_S
    # Schema versions of an effect tool the rules were written for; a call at another version
    # is refused (when the call names its version). Tools not listed: any version.
    tool_versions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    autonomy: Autonomy = Autonomy()

    def __post_init__(self) -> None:
        if not _VERSION.match(self.version):
            raise ConfigError(f"policy version {self.version[:70]!r} is not NAME@n")
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "thresholds", tuple(self.thresholds))
        object.__setattr__(
            self, "tool_versions", {k: frozenset(v) for k, v in self.tool_versions.items()}
        )
        if not 0 < self.approval_ttl_s <= 30 * 86400:
            raise ConfigError("policy approval_ttl_s must be within (0, 30 days]")

    def evaluate(
        self,
        call: Call,
        facts: Facts,
        effects: frozenset[str],
        *,
        autonomy_minor: int | None = None,
    ) -> Decision:
        """Decide on one proposed effect (see the module docstring for the order);
        `autonomy_minor` is the operator's cap (None: no cap)."""
        versions = self.tool_versions.get(call.tool)
        if call.tool not in effects or (
            versions is not None and call.version is not None and call.version not in versions
        ):
            return deny("unknown_tool")
        said = self._rules(call, facts)
        if said is not None:
            return said
        applicable = [t for t in self.thresholds if t.applies(call)]
        if not self.autonomy.before_limits:
            said = next(filter(None, (t.decide(call, self.version) for t in applicable)), None)
            return said or self._autonomy(call, applicable, autonomy_minor) or allow()
        said = next(filter(None, (t.precheck(call, self.version) for t in applicable)), None)
        said = said or self._autonomy(call, applicable, autonomy_minor)
        said = said or next(filter(None, (t.over(call, self.version) for t in applicable)), None)
        return said or allow()

    def _rules(self, call: Call, facts: Facts) -> Decision | None:
        """The rules' verdict: the first deny, else the first approval asked, else None."""
        asked: Decision | None = None
        for rule in self.rules:
            said = rule(call, facts)
            if said is None or said.kind == "allow":
                continue
            if said.kind == "deny":
                return said
            asked = asked or said
        return asked

    def _autonomy(
        self, call: Call, applicable: Sequence[Threshold], cap: int | None
    ) -> Decision | None:
        # The amount is the first applicable threshold's; without one, `amount_minor`.
        field_name = applicable[0].amount if applicable else "amount_minor"
        return self.autonomy.decide(call.args.get(field_name), cap)


def approval_above(
    above: Mapping[str, int],
    *,
    amount: str = "amount_minor",
    currency: str = "currency",
    tools: Sequence[str] = (),
    inclusive: bool = False,
    reason: str = "",
    uncovered: str = "",
) -> Threshold:
    """`Threshold` for `tools` (every effect when empty): `approval_above({"EUR": 10000})` asks
    above EUR 100.00; with `inclusive=True`, at EUR 100.00 too."""
    for code, limit in above.items():
        if not re.fullmatch(r"[A-Z]{3}", code) or isinstance(limit, bool) or limit < 0:
            raise ConfigError(f"threshold {code!r}: a 3-letter currency and a limit >= 0")
    return Threshold(dict(above), amount, currency, frozenset(tools), inclusive, reason, uncovered)
