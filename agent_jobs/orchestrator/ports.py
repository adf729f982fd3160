"""Ports the orchestrator calls. Adapters live in `queue` (Celery) and `obs` (metrics)."""

from __future__ import annotations

from decimal import Decimal
from typing import Protocol

from agent_jobs.store import Dispatch


class Publisher(Protocol):
    """Publishes step messages to tenant queues. Must not raise for a lost broker: the dispatch
    is already recorded in the database and the sweeper will repeat it."""

    def publish(self, dispatch: Dispatch) -> None: ...

    def finished(self, task_id: str, tenant_id: str, seconds: float) -> None:
        """A claimed step of this task ended (however it ended): give back its gate slot,
        charge its cost, and let held work out."""
        ...


class HeldPump(Protocol):
    """The dispatch gate's sweep: reconcile its counts with the database, let held work out."""

    def sweep(self) -> int: ...


class BrokerProbe(Protocol):
    """Whether the broker lost its messages since the last look (restart, database flushed)."""

    def lost_since_last_check(self) -> bool: ...


class Observer(Protocol):
    """Metrics hooks; every method must be cheap and must never raise."""

    def transition(self, workflow: str, frm: str, to: str) -> None: ...

    def step(self, status: str, seconds: float, result: str) -> None: ...

    def lease_expired(self, count: int) -> None: ...

    def reconciled(self, result: str) -> None: ...

    def dead_letter(self, workflow: str) -> None: ...

    def stale_commit(self) -> None: ...

    def task_created(self, workflow: str, via: str) -> None: ...

    def policy_decision(self, policy_version: str, decision: str) -> None: ...

    def model_call(
        self,
        route: str,
        outcome: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cached_input_tokens: int = 0,
        cost: Decimal | float = 0,
    ) -> None: ...

    def tool_call(self, tool: str, outcome: str) -> None: ...

    def unauthorised_action(self, tool: str) -> None: ...

    def held(self, reason: str) -> None: ...

    def task_ended(self, task_id: str) -> None:
        """The task reached a terminal status (committed): e.g. export its trace."""
        ...


class NullObserver:
    def transition(self, workflow: str, frm: str, to: str) -> None:
        pass

    def step(self, status: str, seconds: float, result: str) -> None:
        pass

    def lease_expired(self, count: int) -> None:
        pass

    def reconciled(self, result: str) -> None:
        pass

    def dead_letter(self, workflow: str) -> None:
        pass

    def stale_commit(self) -> None:
        pass

    def task_created(self, workflow: str, via: str) -> None:
        pass

    def policy_decision(self, policy_version: str, decision: str) -> None:
        pass

    def model_call(
        self,
        route: str,
        outcome: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cached_input_tokens: int = 0,
        cost: Decimal | float = 0,
    ) -> None:
        pass

    def tool_call(self, tool: str, outcome: str) -> None:
        pass

    def unauthorised_action(self, tool: str) -> None:
        pass

    def held(self, reason: str) -> None:
        pass

    def task_ended(self, task_id: str) -> None:
        pass


class NeverLost:
    """For brokers whose loss we cannot observe (e.g. RabbitMQ with durable queues)."""

    def lost_since_last_check(self) -> bool:
        return False


class FreshInProcessBroker:
    """The in-process broker starts empty with every process: at the first look, every message
    a previous process (or a CLI in another process) published is gone."""

    def __init__(self) -> None:
        self._checked = False

    def lost_since_last_check(self) -> bool:
        first = not self._checked
        self._checked = True
        return first
