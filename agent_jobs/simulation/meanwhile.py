"""What happens elsewhere while a step runs, and the liveness check when the queue runs dry.

Inside a step, wherever no transaction is open (after each store call, while a business system
holds a request), the world may run other work, as another machine would: an approval decided,
a cancel, a lever, a sweeper, another message delivered, the clock moving. Most of it is aimed
at the task the step is working on, since that is where it can matter: a decision that comes
while the APPROVAL_WAIT step holds the lease, a cancel while an effect is in flight. And now and
then the step's worker stalls past its lease (a pause, a starved keeper) and the rest of the
world takes the task over, by the lease sweeper or another worker's claim, while the first
worker still runs and will try to commit what it computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_jobs.core.states import Status
from agent_jobs.simulation.oracle import Violation
from agent_jobs.simulation.workers import Context, StepFaults
from agent_jobs.store import Dispatch, TaskRow

if TYPE_CHECKING:
    from agent_jobs.simulation.world import World

NESTED = {
    "nothing": 66,
    "decide": 8,
    "sweep": 6,
    "deliver": 6,
    "advance": 5,
    "cancel": 4,
    "takeover": 4,
    "lever": 3,
}
# Right after a system applied a request (its answer not yet back) is where a cancel matters
# most: likelier there.
AT_SEND = {**NESTED, "nothing": 51, "cancel": 15}
# Right after a step read its task's approval, its decision or its expiry is what the step may
# miss: likelier there.
AT_APPROVAL_READ = {**NESTED, "nothing": 33, "decide": 30, "takeover": 15}


def weights(where: str) -> dict[str, int]:
    if where == "send applied":
        return AT_SEND
    if where.startswith("after store.approval"):
        return AT_APPROVAL_READ
    return NESTED


def interleave(world: World, where: str) -> None:
    if world.quiet or world.healing or len(world.stack) != 1:
        return
    step = world.stack[0]
    action = world.choices.weighted(weights(where))
    if action == "nothing":
        return
    world.trace(f"  meanwhile ({where}): {action}")
    world.stack.append(Context(None, StepFaults(), world.operator.levers, step.task_id))
    try:
        if action == "takeover":
            takeover(world, step)
        else:
            world.act(action, nested=True)
    finally:
        world.stack.pop()


def takeover(world: World, step: Context) -> None:
    """The step's worker stalls past its lease, unrenewed, and the world goes on meanwhile:
    the beat's sweepers run (the lease sweeper most often; after a long stall an approval may
    have expired too), or another worker gets a message for the task and claims it."""
    from agent_jobs.simulation.world import SETTINGS, SWEEPS  # noqa: PLC0415 - world imports us

    if step.task_id is None:
        return
    world.fault("stall_past_lease")
    step.stalled = True
    long = world.choices.chance(30)
    seconds = 100 + world.choices.draw(3000) if long else 1 + world.choices.draw(30)
    world.clock.advance(SETTINGS.lease_ttl_s + seconds)
    pick = world.choices.weighted({"lease": 40, "deliver": 30, "other": 30})
    if pick == "lease":
        world.sweep("lease")
    elif pick == "deliver":
        world.broker.publish(Dispatch(step.task_id, "acme"))
        world.deliver(latest=True)
    elif long and world.choices.chance(50):
        world.sweep("approvals")  # a grant the step read may have run out meanwhile
    else:
        world.sweep(world.choices.pick(SWEEPS))


def check_stranded(world: World) -> None:
    """The queue ran dry: a task that moved since the last fault must not wait for a sweeper
    if it can move (a decided approval, a runnable status with no lease)."""
    with world.reading():
        for task_id, task in world.oracle.rows().items():
            if task.lease_owner is not None or task.held_for is not None:
                continue
            if world.excused.get(task_id, -1) >= task.version:
                continue
            if task.status in (Status.RECEIVED, Status.RUNNING, Status.VERIFYING):
                raise Violation("nothing_stranded", f"{task.id} {task.status.value}, no message")
            if task.status is Status.APPROVAL_WAIT and task.attempts == 0:
                # (attempts > 0: a failed step's backoff timer wakes it, by design)
                decided = [
                    a
                    for a in world.store.list_approvals("acme", task_id=task.id)
                    if a.status in ("granted", "denied")
                ]
                if decided:
                    raise Violation(
                        "nothing_stranded",
                        f"{task.id} waits in APPROVAL_WAIT on a {decided[0].status} approval "
                        "with no message (until the dispatch grace)",
                    )


# What wakes a task parked for a person, each publishing its step (or, when a step held the
# lease, handing it to that step's release).
WAKES = frozenset({"approval_granted", "approval_denied", "approval_expired", "cancel_requested"})


def check_woken(world: World, rows: dict[str, TaskRow]) -> None:
    """After each action: a task whose approval was decided (or expired, or that was asked to
    cancel) moves on the message that woke it, not the dispatch sweeper's (defect D5: a
    decision that came while a step held the lease lost its wake-up).

    Unless the broker lost that message: a task that lost one since its last event (the
    decision is one) waits for the sweeper, by design; and one whose step failed after the
    decision waits for its backoff timer, by design (its last event is then the failure); and
    one whose grant ran out before its step could use it waits for the approvals sweeper,
    which expires the grant and wakes it."""
    for task_id in world.broker.lost:
        if task_id in rows:
            world.lost[task_id] = rows[task_id].event_seq
    world.broker.lost.clear()
    queued = {d.task_id for d in world.broker.queue}
    for task_id, task in rows.items():
        if (
            task.status is not Status.APPROVAL_WAIT
            or task.lease_owner is not None
            or task.held_for is not None
            or task_id in queued
            or world.lost.get(task_id) == task.event_seq
            or world.looked.get(task_id) == task.event_seq  # (read already, as it is now)
        ):
            continue
        world.looked[task_id] = task.event_seq
        last = world.store.events(task_id, after_seq=task.event_seq - 1)[-1]
        if last.type in WAKES and not _expiring(world, task_id):
            raise Violation(
                "decision_wakes",
                f"{task_id} waits in APPROVAL_WAIT after {last.type} with no message "
                "(until the dispatch grace)",
            )


def _expiring(world: World, task_id: str) -> bool:
    """Whether an approval of the task is past its expiry, not yet marked expired."""
    now = world.clock.now()
    return any(
        a.status in ("pending", "granted") and a.expires_at <= now
        for a in world.store.list_approvals("acme", task_id=task_id)
    )
