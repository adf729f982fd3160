"""What an operator does, whichever way they come in (CLI or API): change a switch, read the
history, query an incident, replay a dead letter. One implementation; the transports format.

A change is committed (switch row and history row in one transaction), then announced on Redis
so every process re-reads at once; the process that made the change also releases what a pause
it turned off was holding, so resuming does not wait for a worker or the sweeper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import redis

from agent_jobs.core.errors import InvalidInput
from agent_jobs.ops.lever_wake import wake_held
from agent_jobs.ops.live import notify, to_set
from agent_jobs.ops.switches import ALL, Kind, check_key, check_value
from agent_jobs.redis_clients import client as redis_client
from agent_jobs.store import Dispatch, Store
from agent_jobs.store.dead_letters import ReplayResult
from agent_jobs.store.ops import (
    IncidentFilter,
    IncidentTask,
    SwitchChange,
    SwitchRow,
)

log = logging.getLogger(__name__)


@dataclass
class OpsService:
    store: Store
    # Sends a step message through this process's gate (the runtime's publisher).
    publish: Callable[[Dispatch], None]
    redis_url: str | None = None
    prefix: str = "aj"
    sentinel_master: str | None = None

    def _announce(self) -> int:
        if self.redis_url is None:
            return 0  # embedded: processes re-read within the poll interval
        client = redis_client(self.redis_url, master=self.sentinel_master)
        try:
            return notify(client, self.prefix)
        except redis.RedisError as exc:
            log.warning("switch change not announced (%s): processes re-read within seconds", exc)
            return 0
        finally:
            client.close()

    def set(
        self,
        kind: str,
        *,
        tenant_id: str = ALL,
        target: str = ALL,
        value: Any = True,
        actor: str,
        reason: str,
    ) -> SwitchRow:
        """Turn a switch on (or change its value). `reason` is required: it is the audit."""
        key = check_key(kind, tenant_id, target)
        if key.kind is Kind.CREDENTIAL_EPOCH and value is True:
            value = self.store.db_now().timestamp()  # "revoke now"
        stored = check_value(key.kind, value)
        _check_words(actor, reason)
        row = self.store.set_switch(
            key.kind.value, key.tenant_id, key.target, stored, actor=actor, reason=reason
        )
        self._announce()
        return row

    def clear(
        self, kind: str, *, tenant_id: str = ALL, target: str = ALL, actor: str, reason: str
    ) -> bool:
        """Turn a switch off; a pause turned off releases its held tasks, oldest first, and a
        write lever wakes the tasks it parked (`lever_wake`)."""
        key = check_key(kind, tenant_id, target)
        _check_words(actor, reason)
        gone = self.store.clear_switch(
            key.kind.value, key.tenant_id, key.target, actor=actor, reason=reason
        )
        if gone:
            self._announce()
            if key.kind is Kind.PAUSED:
                self.release_paused()
            else:
                wake_held(self.store, key, self.publish)  # the tasks a write lever held
        return gone

    def release_paused(self) -> int:
        from agent_jobs.queue.gate import release_paused  # noqa: PLC0415 - queue is above ops

        return release_paused(self.store, to_set(self.store.switches()), self.publish)

    def switches(self) -> list[SwitchRow]:
        return sorted(self.store.switches(), key=lambda r: (r.kind, r.tenant_id, r.target))

    def history(
        self, limit: int = 100, tenant_ids: Collection[str] | None = None
    ) -> list[SwitchChange]:
        """The latest changes first; `tenant_ids` limits them to those tenants ("" is all)."""
        return self.store.switch_history(limit=limit, tenant_ids=tenant_ids)

    def incident_tasks(self, f: IncidentFilter, limit: int = 1000) -> list[IncidentTask]:
        if f.until <= f.since:
            raise InvalidInput("--until must be after --since")
        return self.store.incident_tasks(f, limit=limit)

    def replay(self, task_id: str, *, actor: str, why: str) -> ReplayResult:
        """Resume one dead-lettered task; a second replay of the same dead letter does nothing."""
        _check_words(actor, why)
        result = self.store.replay_dead_letter(task_id, actor=actor, why=why)
        if result.dispatch is not None:
            self.publish(result.dispatch)  # after the commit; the sweeper re-sends if lost
        return result

    def replay_matching(
        self, *, actor: str, why: str, limit: int = 100, **filters: Any
    ) -> list[ReplayResult]:
        return [
            self.replay(task_id, actor=actor, why=why)
            for task_id in self.store.dead_letter_ids(limit=limit, **filters)
        ]


def _check_words(actor: str, reason: str) -> None:
    if not actor.strip():
        raise InvalidInput("who is making the change must be named")
    if not reason.strip():
        raise InvalidInput("a reason is required (it is the audit record)")
    if len(reason) > 1000:
        raise InvalidInput("the reason must be at most 1000 characters")


def from_runtime(runtime: Any) -> OpsService:
    """The service over a `queue.runtime.Runtime` (or anything with store, publisher, settings)."""
    cfg = runtime.settings
    # The runtime's publisher (through the gate); a runtime without one (the API over a test
    # harness) publishes through its orchestrator's.
    publisher = getattr(runtime, "publisher", None) or runtime.orchestrator.publisher
    return OpsService(
        runtime.store,
        publisher.publish,
        redis_url=cfg.directory_redis_url,
        prefix=cfg.queue_prefix,
        sentinel_master=cfg.sentinel_master,
    )
