"""The simulated broker: step messages in a list the schedule reads from the front, mostly, and
loses, repeats, delays and empties on cue (as Redis restarted without persistence would)."""

from __future__ import annotations

from collections import deque

from agent_jobs.simulation.choices import Choices
from agent_jobs.store import Dispatch


class SimBroker:
    """A `Publisher` and the `BrokerProbe` the dispatch sweeper asks."""

    def __init__(self, choices: Choices) -> None:
        self.choices = choices
        self.queue: deque[Dispatch] = deque()
        self.published = 0
        self._lost = False
        self.lost: list[str] = []  # the tasks whose messages were lost, since the world read it

    def publish(self, dispatch: Dispatch) -> None:
        self.published += 1
        self.queue.append(dispatch)

    def finished(self, task_id: str, tenant_id: str, seconds: float) -> None:
        """No gate in the simulation: tenants' fairness is not what it checks."""

    def lost_since_last_check(self) -> bool:
        lost, self._lost = self._lost, False
        return lost

    def take(self) -> Dispatch | None:
        """The next message, or now and then one further back (messages overtake each other)."""
        if not self.queue:
            return None
        at = self.choices.draw(len(self.queue)) if self.choices.chance(15) else 0
        message = self.queue[at]
        del self.queue[at]
        return message

    def take_latest(self) -> Dispatch | None:
        """The message published last (a worker that was idle takes it at once)."""
        return self.queue.pop() if self.queue else None

    def redeliver(self, dispatch: Dispatch) -> None:
        self.queue.append(dispatch)

    def fault(self, kind: str) -> None:
        if (not self.queue and kind != "empty") or kind == "stray":
            return
        if kind == "drop":
            self.lost.append(self.queue.popleft().task_id)
        elif kind == "duplicate":
            self.queue.append(self.queue[0])
        elif kind == "delay":
            self.queue.rotate(-1)
        elif kind == "empty":
            self.lost.extend(d.task_id for d in self.queue)
            self.queue.clear()
            self._lost = True
