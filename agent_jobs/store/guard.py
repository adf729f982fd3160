"""`Guard`: what one guarded write pins of the row its writer last saw (invariant 1).

Every status change is `Store.transition(guard, patch)`: the row moves only if it is still the
row the guard names. The version and lease epoch always; the lease owner always (None: the
task holds no lease, or a sweeper acts on one that lapsed); the event count and the gate's hold
when the writer did not read the row it starts from (a row a previous commit handed on).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_jobs.store.rows import Lease, TaskRow


@dataclass(frozen=True)
class Guard:
    task: TaskRow  # the row as the writer last saw it: its id, version, status, trace
    owner: str | None
    epoch: int
    # The event count as `task` had it: a cancel, a decided approval or any event appended since
    # bumps it without moving the version.
    seq: int | None = None
    # The gate does not hold the task (a held task has no message on purpose).
    unheld: bool = False

    @classmethod
    def lease(cls, lease: Lease) -> Guard:
        """A step under its lease: the row as claimed, fenced by the lease's owner and epoch."""
        return cls(lease.task, lease.owner, lease.epoch)

    @classmethod
    def seen(cls, task: TaskRow) -> Guard:
        """A row just read (a quick step after its read, a sweeper, a replay): its own owner
        and epoch, whatever they were."""
        return cls(task, task.lease_owner, task.lease_epoch)

    @classmethod
    def carried(cls, task: TaskRow) -> Guard:
        """A row a previous commit returned and a message carried, not read again: everything a
        read would have checked is pinned instead (a lost compare-and-set sends the step back
        to a read)."""
        return cls(task, task.lease_owner, task.lease_epoch, seq=task.event_seq, unheld=True)
