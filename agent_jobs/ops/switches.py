"""Incident switches: what an operator can turn on without a deployment, and how it is read.

A switch is keyed by (kind, tenant, target); "" means every tenant, or no target. The set in
force is a `SwitchSet`, an immutable snapshot that the executor, the dispatch gate and the policy
ask questions of ("is this tool disabled for this tenant?"). Where a snapshot comes from is the
`Switches` port: `StaticSwitches` here (tests, embedded use), the store-backed cache in
`ops.live` in workers and the API.

Pure: no clock, no I/O. Values are validated here so the CLI, the API and the store agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.identity import check_tenant_id

ALL = ""  # every tenant, or no target

# How long a process may serve a set it was not told about: the backstop re-read of the table
# (a lost notification is noticed within this), and how soon a task parked because side effects
# were stopped asks again.
POLL_INTERVAL_S = 2.0

EFFECTS_STOPPED_CODE = "effects_stopped"
EFFECTS_STOPPED_REASON = "effects stopped by operator"
# The codes of a write an operator switch made wait (`tools.executor`): the orchestrator's
# throttle bound should not count these waits (see the report on steps.py).
OPERATOR_STOP_CODES = frozenset(
    {"effects_stopped", "read_only", "tool_disabled", "credential_revoked"}
)


class Kind(StrEnum):
    """The levers. Targets: a tool name (`tool_disabled`), a workflow name (`paused`)."""

    TOOL_DISABLED = "tool_disabled"  # tenant or all; target: the tool
    READ_ONLY = "read_only"  # tenant (or all): only tools without side effects
    PAUSED = "paused"  # tenant, all; target: a workflow (`name` or `name@version`) or all
    EFFECTS_STOPPED = "effects_stopped"  # tenant or all: writes wait, reads go on
    CREDENTIAL_EPOCH = "credential_epoch"  # tenant or all: credentials minted before are void
    AUTONOMY_THRESHOLD = "autonomy_threshold"  # tenant or all: auto-execute under this (minor)


_TARGETED = {Kind.TOOL_DISABLED: True, Kind.PAUSED: False}

# The levers that hold a write, by the code a task they hold is parked with (its park's detail
# begins with it: `effects_stopped: effects stopped by operator`). An autonomy threshold holds
# nothing itself: a task whose decision it changed before the send is parked `levers_changed`,
# to be decided again. Turning one off wakes the tasks it parked (`wakes_on_clear`).
LEVERS_CHANGED_CODE = "levers_changed"
WRITE_LEVERS: dict[Kind, str] = {
    Kind.TOOL_DISABLED: "tool_disabled",
    Kind.READ_ONLY: "read_only",
    Kind.EFFECTS_STOPPED: EFFECTS_STOPPED_CODE,
    Kind.CREDENTIAL_EPOCH: "credential_revoked",
    Kind.AUTONOMY_THRESHOLD: LEVERS_CHANGED_CODE,
}
_HOLD_CODES = frozenset(WRITE_LEVERS.values())


@dataclass(frozen=True, order=True)
class SwitchKey:
    kind: Kind
    tenant_id: str = ALL
    target: str = ALL

    def label(self) -> str:
        where = self.tenant_id or "*"
        return f"{self.kind.value}[{where}{'/' + self.target if self.target else ''}]"


@dataclass(frozen=True)
class Switch:
    """One switch in force: its value, and who turned it on, why and when."""

    key: SwitchKey
    value: Any
    actor: str
    reason: str
    changed_at: datetime

    def why(self) -> str:
        return f"{self.key.label()} by {self.actor}: {self.reason}"


def check_key(kind: str, tenant_id: str = ALL, target: str = ALL) -> SwitchKey:
    """The key for these words, or `InvalidInput` saying what is wrong."""
    try:
        k = Kind(kind)
    except ValueError:
        raise InvalidInput(
            f"unknown switch {kind!r} (known: {', '.join(x.value for x in Kind)})"
        ) from None
    if tenant_id:
        try:
            check_tenant_id(tenant_id)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    needs_target = _TARGETED.get(k)
    if needs_target is None and target:
        raise InvalidInput(f"switch {k.value} takes no target")
    if needs_target and not target:
        raise InvalidInput(f"switch {k.value} needs a target (the tool name)")
    if len(target) > 128 or (target and not target.isprintable()):
        raise InvalidInput("switch target must be at most 128 printable characters")
    return SwitchKey(k, tenant_id, target)


def check_value(kind: Kind, value: Any) -> Any:
    """The stored value for a switch: True for on/off levers, a number for the others."""
    if kind is Kind.CREDENTIAL_EPOCH:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise InvalidInput("credential_epoch is a time in epoch seconds")
        return float(value)
    if kind is Kind.AUTONOMY_THRESHOLD:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput("autonomy_threshold is an amount in minor units, 0 or more")
        return value
    if value is not True:
        raise InvalidInput(f"switch {kind.value} is on or off; its value is true")
    return True


def _workflow_name(workflow: str) -> str:
    return workflow.split("@", 1)[0]


@dataclass(frozen=True)
class SwitchSet:
    """The switches in force, as one snapshot. Questions return the switch that answers them
    (so a refusal can say who and why), or None."""

    switches: Mapping[SwitchKey, Switch] = field(default_factory=dict)

    @classmethod
    def of(cls, switches: Iterable[Switch]) -> SwitchSet:
        return cls({s.key: s for s in switches})

    def __len__(self) -> int:
        return len(self.switches)

    def _get(self, kind: Kind, tenant_id: str, target: str = ALL) -> Switch | None:
        return self.switches.get(SwitchKey(kind, tenant_id, target))

    def _either(self, kind: Kind, tenant_id: str, target: str = ALL) -> Switch | None:
        return self._get(kind, ALL, target) or self._get(kind, tenant_id, target)

    def tool_disabled(self, tool: str, tenant_id: str) -> Switch | None:
        return self._either(Kind.TOOL_DISABLED, tenant_id, tool)

    def read_only(self, tenant_id: str) -> Switch | None:
        return self._either(Kind.READ_ONLY, tenant_id)

    def effects_stopped(self, tenant_id: str) -> Switch | None:
        return self._either(Kind.EFFECTS_STOPPED, tenant_id)

    def write_held(self, tool: str, tenant_id: str) -> tuple[str, str] | None:
        """Why a write of `tool` (a side effect) for this tenant must wait now, as its code and
        message, or None: the tool disabled, the tenant read-only, or its effects stopped."""
        if self.tool_disabled(tool, tenant_id) is not None:
            return "tool_disabled", f"{tool} is disabled by operator"
        if self.read_only(tenant_id) is not None:
            return "read_only", "tenant downgraded to read-only tools by operator"
        if self.effects_stopped(tenant_id) is not None:
            return EFFECTS_STOPPED_CODE, EFFECTS_STOPPED_REASON
        return None

    def paused(self, tenant_id: str, workflow: str | None = None) -> Switch | None:
        """Everything, the tenant, or (when given) the workflow (by name, or name@version)."""
        found = self._either(Kind.PAUSED, tenant_id)
        if found is not None or workflow is None:
            return found
        for target in (workflow, _workflow_name(workflow)):
            found = self._either(Kind.PAUSED, tenant_id, target)
            if found is not None:
                return found
        return None

    def pauses_workflows(self) -> bool:
        """Whether any pause names a workflow (then the gate must know a task's workflow)."""
        return any(k.kind is Kind.PAUSED and k.target for k in self.switches)

    def pauses_tenant(self, tenant_id: str) -> bool:
        """Whether some pause may apply to this tenant's tasks (before knowing the workflow)."""
        return any(k.kind is Kind.PAUSED and k.tenant_id in (ALL, tenant_id) for k in self.switches)

    def credential_epoch(self, tenant_id: str) -> float | None:
        """Credentials minted before this instant (epoch seconds) are void: the later of the
        global and the tenant's epoch."""
        found = (self._get(Kind.CREDENTIAL_EPOCH, ALL), self._get(Kind.CREDENTIAL_EPOCH, tenant_id))
        values = [float(s.value) for s in found if s is not None]
        return max(values) if values else None

    def autonomy_threshold(self, tenant_id: str = ALL) -> int | None:
        """The most an action may be worth (minor units) and still execute without a person;
        the lower of the global and the tenant's value. None: the policy's own thresholds."""
        values = [
            int(s.value)
            for s in (
                self._get(Kind.AUTONOMY_THRESHOLD, ALL),
                self._get(Kind.AUTONOMY_THRESHOLD, tenant_id) if tenant_id else None,
            )
            if s is not None
        ]
        return min(values) if values else None


NO_SWITCHES = SwitchSet()


def held_code(detail: str) -> str | None:
    """The lever a held park names: the code its detail begins with (`code` or `code: ...`,
    as every path that parks for a lever writes it), or None when it names none we know."""
    code = detail.split(":", 1)[0].strip()
    return code if code in _HOLD_CODES else None


def wakes_on_clear(
    cleared: SwitchKey, detail: str, tool: str | None, tenant_id: str, now: SwitchSet
) -> bool:
    """Whether turning `cleared` off should wake a task of `tenant_id` parked by a lever (its
    park's `detail`, its pending action's `tool`), `now` being the switches still in force.

    Its own lever's park wakes, unless another lever in force still holds the write (waking it
    would only park it again). A `levers_changed` park waits for a lever to change: any turned
    off wakes it. A park that names no lever we know wakes too: on waking it asks the levers and
    the policy again (invariant 11), so a wrong guess costs one ask, never a send."""
    if cleared.kind not in WRITE_LEVERS or cleared.tenant_id not in (ALL, tenant_id):
        return False
    code = held_code(detail)
    if code is None or code == LEVERS_CHANGED_CODE:
        return True
    if code != WRITE_LEVERS[cleared.kind]:
        return False
    if cleared.kind is Kind.TOOL_DISABLED and cleared.target != tool:
        return False
    return tool is None or now.write_held(tool, tenant_id) is None


class Switches(Protocol):
    """The port: the switch set this process obeys now."""

    def current(self) -> SwitchSet: ...


class StaticSwitches:
    """A set held in memory (tests, and the embedded mode's default of none). `set` replaces it."""

    def __init__(self, switches: SwitchSet = NO_SWITCHES) -> None:
        self._set = switches

    def current(self) -> SwitchSet:
        return self._set

    def set(self, switches: SwitchSet) -> None:
        self._set = switches
