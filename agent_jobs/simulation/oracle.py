"""The invariants, judged from what the business systems received (`systems.Call`) and what the
database holds, on every send and at the end of every schedule.

On each send:
- **intent first**: the key's `effects` row is committed as `intent` and its task is EXECUTING;
- **no resend on a guess**: a key sent before is sent again only if its last send was answered
  with a definitive refusal (throttled, rejected, unavailable) or a lookup since answered
  "not found";
- **authorised**: where the policy in force asks a person, a grant bound to the action's hash,
  by someone other than the requester, consumed, not expired; no lever in force that holds
  effects (effects stopped, read-only, the tool disabled) and none that sends the action to
  a person (autonomy) since the step began.

Continuously: no terminal task holds a lease; a task parked in RETRY_WAIT says why.

At the end, after the world healed and settled:
- every task terminal;
- at most one applied effect per action of a task;
- every applied effect recorded on its task as committed (or the task escalated naming its key);
- every effect recorded as committed was applied, with the result the system gave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.simulation.systems import REFUSALS, Call
from agent_jobs.store import Store, TaskRow


class Violation(BaseException):
    """An invariant broke. `invariant` names it (stable: shrinking keeps the same one). A
    BaseException, as a dying worker is: raised inside a step (at a send), no handler of the
    runtime may take it for a failed call and carry on."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


@dataclass(frozen=True)
class Levers:
    """The levers the oracle judges a send by (what an operator turned on)."""

    effects_stopped: bool = False
    tool_disabled: frozenset[str] = frozenset()
    autonomy_minor: int | None = None


# (task, action args, levers) -> "allow" | "needs_approval" | "deny": the policy as the
# scenario states it, independent of the workflow's own code.
PolicyOracle = Callable[[TaskRow, dict[str, Any], Levers], str]


def resend_allowed(previous: Sequence[Call]) -> bool:
    """Whether a key whose earlier calls are `previous` (oldest first) may be sent again."""
    last_send = max((c.seq for c in previous if c.kind == "send"), default=None)
    if last_send is None:
        return True
    last = next(c for c in previous if c.seq == last_send)
    if last.answer in REFUSALS:
        return True
    return any(
        c.kind == "lookup" and c.answer == "not_found" and c.seq > last_send for c in previous
    )


# How a workflow records an effect's result (`effects.result`) -> what the system answered:
# the identity for `example@1`; an agent wraps it with how it was found.
Unwrap = Callable[[dict[str, Any] | None], Any]


class Oracle:
    def __init__(
        self, store: Store, policies: dict[str, PolicyOracle], unwrap: dict[str, Unwrap]
    ) -> None:
        self.store = store
        self.policies = policies
        self.unwrap = unwrap
        self.tasks: list[str] = []
        self.checked_sends = 0

    # -- on every send ---------------------------------------------------------------------

    def task_for_key(self, key: str) -> tuple[TaskRow, Any] | None:
        for task_id in self.tasks:
            effect = self.store.effect(task_id, key)
            if effect is not None:
                return self.store.get(task_id), effect
        return None

    def on_send(
        self,
        call: Call,
        calls: Sequence[Call],
        now: datetime,
        levers: Levers,
        at_start: Levers,
        *,
        stalled: bool = False,
    ) -> None:
        """`stalled`: the sender stalled past its lease after committing the intent, and the
        task was taken over meanwhile. Nothing in the runtime can stop that send (it was on its
        way; only the key fences it at the system): it is held to its committed intent and its
        authorisation, and the system's applying a key once to `applied_once`. Its grant must
        still be live at the send, stalled or not: the sender's last check is on its own clock,
        after its last read (`EffectSteps.grant_lapsed`)."""
        self.checked_sends += 1
        found = self.task_for_key(call.key)
        if found is None:
            raise Violation("intent_first", f"{call.key} sent with no effect row")
        task, effect = found
        if not stalled and (effect.status != "intent" or task.status is not Status.EXECUTING):
            raise Violation(
                "intent_first",
                f"{call.key} sent while its effect is {effect.status} and its task "
                f"{task.status.value}",
            )
        earlier = [c for c in calls if c.key == call.key and c.seq < call.seq]
        if not stalled and not resend_allowed(earlier):
            last = [f"{c.kind}:{c.answer}" for c in earlier]
            raise Violation("no_resend_on_a_guess", f"{call.key} sent again after {last}")
        if levers.effects_stopped or call.system in levers.tool_disabled:
            raise Violation("levers", f"{call.key} sent while a lever held effects: {levers}")
        policy = self.policies[task.workflow.partition("@")[0]]
        for lev in (at_start, levers):
            decision = policy(task, call.args, lev)
            if decision == "deny":
                raise Violation("authorised", f"{call.key} sent though the policy denies it")
            if decision == "needs_approval":
                self._granted(task, effect.action_hash, now, call.key)

    def _granted(self, task: TaskRow, action_hash: str, now: datetime, key: str) -> None:
        for a in self.store.list_approvals(task.tenant_id, task_id=task.id):
            if a.action_hash != action_hash or a.status != "used":
                continue
            if a.approver is None or a.approver == a.requester:
                raise Violation("authorised", f"{key}: approved by its requester")
            if a.expires_at > now:
                return
        raise Violation(
            "authorised", f"{key} sent without a live, consumed grant for its action hash"
        )

    # -- continuously ----------------------------------------------------------------------

    def rows(self) -> dict[str, TaskRow]:
        """The schedule's tasks as they are now, in one read."""
        found = {t.id: t for t in self.store.list_tasks("acme", limit=1000)}
        return {t: found[t] for t in self.tasks}

    def check_rows(self, rows: dict[str, TaskRow] | None = None) -> None:
        for task in (rows if rows is not None else self.rows()).values():
            if task.status in TERMINAL and task.lease_owner is not None:
                raise Violation(
                    "terminal_without_lease",
                    f"{task.id} is {task.status.value} and holds a lease ({task.lease_owner})",
                )
            self._check_records(task)
            if task.status is Status.RETRY_WAIT:
                rt = task.state.get("runtime") or {}
                if not isinstance(rt.get("park"), dict) or not rt["park"].get("reason"):
                    raise Violation(
                        "parked_says_why", f"{task.id} is in RETRY_WAIT with no park reason"
                    )

    def _check_records(self, task: TaskRow) -> None:
        """A transition and the records it moves commit together (defect D3, half a
        transition): a task waiting on an approval has that approval's row, and a task whose
        effect is unknown has that effect's row, unknown."""
        rt = task.state.get("runtime") or {}
        if task.status is Status.APPROVAL_WAIT and rt.get("approval_id"):
            approval_id = str(rt["approval_id"])
            if not any(
                a.approval_id == approval_id
                for a in self.store.list_approvals(task.tenant_id, task_id=task.id)
            ):
                raise Violation(
                    "records_with_rows",
                    f"{task.id} waits in APPROVAL_WAIT on {approval_id}, which has no row",
                )
        if task.status is Status.EXEC_UNKNOWN and isinstance(rt.get("pending_action"), dict):
            key = rt["pending_action"].get("idempotency_key")
            found = self.store.effect(task.id, str(key))
            if found is None or found.status != "unknown":
                raise Violation(
                    "records_with_rows",
                    f"{task.id} is EXEC_UNKNOWN and its effect {key} is "
                    f"{found.status if found else 'missing'}",
                )

    # -- at the end ------------------------------------------------------------------------

    def final(self, applied: dict[str, Any]) -> None:
        recorded: dict[str, tuple[TaskRow, Any]] = {}
        for task_id in self.tasks:
            task = self.store.get(task_id)
            if task.status not in TERMINAL:
                raise Violation("settles", f"{task.id} still {task.status.value} after healing")
            by_args: dict[str, str] = {}
            for effect in self.store.effects(task_id):
                recorded[effect.idempotency_key] = (task, effect)
                unwrap = self.unwrap[task.workflow.partition("@")[0]]
                self._recorded_as_applied(effect, unwrap, applied.get(effect.idempotency_key))
                done = applied.get(effect.idempotency_key)
                if done is not None:
                    identity = repr(sorted(done.args.items()))
                    if identity in by_args:
                        raise Violation(
                            "applied_once",
                            f"{task.id}: one action applied under {by_args[identity]} and "
                            f"{effect.idempotency_key}",
                        )
                    by_args[identity] = effect.idempotency_key
        self._applied_recorded(applied, recorded)

    @staticmethod
    def _recorded_as_applied(effect: Any, unwrap: Unwrap, done: Any) -> None:
        if effect.status != "committed":
            return
        if done is None:
            raise Violation(
                "committed_was_applied",
                f"{effect.idempotency_key} recorded committed but never applied",
            )
        if unwrap(effect.result) != done.result:
            raise Violation(
                "one_stored_shape",
                f"{effect.idempotency_key} recorded {effect.result!r}, "
                f"the system gave {done.result!r}",
            )

    def _applied_recorded(
        self, applied: dict[str, Any], recorded: dict[str, tuple[TaskRow, Any]]
    ) -> None:
        for key in applied:
            if key not in recorded:
                raise Violation("applied_recorded", f"{key} applied but on no task")
            task, effect = recorded[key]
            if effect.status == "committed":
                continue
            if task.status is Status.ESCALATED and self._names(task, key):
                continue
            raise Violation(
                "applied_recorded",
                f"{key} applied, but {task.id} ended {task.status.value} with the effect "
                f"{effect.status}",
            )

    def _names(self, task: TaskRow, key: str) -> bool:
        if key in repr(task.outcome):
            return True
        return any(key in repr(e.data) for e in self.store.events(task.id))
