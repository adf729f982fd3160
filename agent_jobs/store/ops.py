"""The store's side of the control plane: operator switches and their history, and incident
queries (dead-letter replay is `dead_letters.py`).

Switches: the current set is one row per (kind, tenant, target) in `ops_switches`; every change is
also an `ops_switch_history` row, in the same transaction, so the history cannot miss one.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, exists, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from agent_jobs.core.contracts import EffectView
from agent_jobs.store.base import StoreBase
from agent_jobs.store.holds import _HELD
from agent_jobs.store.rows import Dispatch, effect_from_row
from agent_jobs.store.schema import (
    effects,
    ops_switch_history,
    ops_switches,
    task_events,
    tasks,
)
from agent_jobs.store.types import db_now


@dataclass(frozen=True)
class SwitchRow:
    kind: str
    tenant_id: str
    target: str
    value: Any
    actor: str
    reason: str
    changed_at: datetime


@dataclass(frozen=True)
class SwitchChange:
    """One row of the history: `value` None means the switch was turned off."""

    id: int
    kind: str
    tenant_id: str
    target: str
    value: Any
    actor: str
    reason: str
    at: datetime


@dataclass(frozen=True)
class IncidentFilter:
    """Which tasks an incident query is about. Every given field must match; the window is
    [since, until) against the task's life (created before `until`, last changed after `since`)."""

    since: datetime
    until: datetime
    tool: str | None = None
    tool_version: str | None = None
    prompt: str | None = None
    model_route: str | None = None
    workflow: str | None = None  # `name` or `name@version`
    policy_version: str | None = None
    tenant_id: str | None = None


@dataclass(frozen=True)
class IncidentTask:
    task_id: str
    tenant_id: str
    workflow: str
    status: str
    created_at: datetime
    updated_at: datetime
    pinned: dict[str, Any]
    policy_versions: list[str]
    tools_used: list[str]
    effects: list[EffectView] = field(default_factory=list)


def _tool_of_event(type_: str) -> str | None:
    return type_.removeprefix("execute_tool ") if type_.startswith("execute_tool ") else None


def _pinned_match(f: IncidentFilter, pinned: dict[str, Any]) -> bool:
    if f.prompt is not None and pinned.get("prompt") != f.prompt:
        return False
    return f.model_route is None or pinned.get("model_route") == f.model_route


class OpsStore(StoreBase):
    # -- switches ------------------------------------------------------------------------------

    def switches(self) -> list[SwitchRow]:
        """The switches in force (a small table: read whole)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(ops_switches)).mappings().all()
            conn.rollback()
        return [SwitchRow(**dict(r)) for r in rows]

    def set_switch(
        self, kind: str, tenant_id: str, target: str, value: Any, *, actor: str, reason: str
    ) -> SwitchRow:
        """Turn a switch on (or change its value), recording the change in the history."""
        key = {"kind": kind, "tenant_id": tenant_id, "target": target}
        with self.tx() as conn:
            now = conn.execute(select(db_now())).scalar_one()
            values = {"value": value, "actor": actor, "reason": reason, "changed_at": now}
            try:
                with conn.begin_nested():
                    conn.execute(insert(ops_switches).values(**key, **values))
            except IntegrityError:
                conn.execute(
                    update(ops_switches)
                    .where(
                        (ops_switches.c.kind == kind)
                        & (ops_switches.c.tenant_id == tenant_id)
                        & (ops_switches.c.target == target)
                    )
                    .values(**values)
                )
            self._switch_changed(conn, key, value, actor=actor, reason=reason, at=now)
        return SwitchRow(kind, tenant_id, target, value, actor, reason, now)

    def clear_switch(
        self, kind: str, tenant_id: str, target: str, *, actor: str, reason: str
    ) -> bool:
        """Turn a switch off. False (and no history row) if it was not on."""
        key = {"kind": kind, "tenant_id": tenant_id, "target": target}
        with self.tx() as conn:
            gone = conn.execute(
                delete(ops_switches).where(
                    (ops_switches.c.kind == kind)
                    & (ops_switches.c.tenant_id == tenant_id)
                    & (ops_switches.c.target == target)
                )
            ).rowcount
            if gone:
                now = conn.execute(select(db_now())).scalar_one()
                self._switch_changed(conn, key, None, actor=actor, reason=reason, at=now)
        return bool(gone)

    @staticmethod
    def _switch_changed(
        conn: Connection, key: dict[str, str], value: Any, *, actor: str, reason: str, at: datetime
    ) -> None:
        conn.execute(
            insert(ops_switch_history).values(
                **key, value=value, actor=actor[:255], reason=reason[:1000], at=at
            )
        )

    def switch_history(
        self,
        *,
        since: datetime | None = None,
        limit: int = 100,
        tenant_ids: Collection[str] | None = None,
    ) -> list[SwitchChange]:
        """The most recent changes first; with `tenant_ids`, only the changes to those tenants'
        switches ("" is the platform-wide ones)."""
        q = select(ops_switch_history).order_by(ops_switch_history.c.id.desc()).limit(limit)
        if since is not None:
            q = q.where(ops_switch_history.c.at >= since)
        if tenant_ids is not None:
            q = q.where(ops_switch_history.c.tenant_id.in_(list(tenant_ids)))
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
            conn.rollback()
        return [SwitchChange(**dict(r)) for r in rows]

    # -- holds of the pause switches (see queue/gate.py) ---------------------------------------

    def held_groups(self, reason: str) -> list[tuple[str, str]]:
        """(tenant, workflow) pairs with tasks held for `reason`."""
        q = (
            select(tasks.c.tenant_id, tasks.c.workflow)
            .where(_HELD & (tasks.c.held_for == reason))
            .distinct()
        )
        with self.engine.connect() as conn:
            rows = [(str(t), str(w)) for t, w in conn.execute(q)]
            conn.rollback()
        return rows

    def take_held_groups(
        self, reason: str, groups: list[tuple[str, str]], limit: int
    ) -> list[Dispatch]:
        """Release up to `limit` tasks held for `reason` in these (tenant, workflow) groups,
        oldest hold first, recording their dispatch (the caller publishes them, in this order).
        SKIP LOCKED on Postgres: two processes releasing at once never take the same task."""
        if not groups:
            return []
        cond = (
            _HELD
            & (tasks.c.held_for == reason)
            & or_(*((tasks.c.tenant_id == t) & (tasks.c.workflow == w) for t, w in groups))
        )
        with self.tx() as conn:
            ids = select(tasks.c.id).where(cond).order_by(tasks.c.held_since).limit(limit)
            ids = self.backend.skip_locked(ids)
            picked = list(conn.execute(ids).scalars())
            if not picked:
                return []
            rows = conn.execute(
                update(tasks)
                .where(tasks.c.id.in_(picked) & cond)
                .values(held_since=None, held_for=None, dispatched_at=db_now())
                .returning(tasks.c.id, tasks.c.tenant_id)
            ).all()
        order = {tid: i for i, tid in enumerate(picked)}
        return [Dispatch(r[0], r[1]) for r in sorted(rows, key=lambda r: order[r[0]])]

    def workflow_of(self, task_id: str) -> str | None:
        with self.engine.connect() as conn:
            value = conn.execute(
                select(tasks.c.workflow).where(tasks.c.id == task_id)
            ).scalar_one_or_none()
            conn.rollback()
        return None if value is None else str(value)

    # -- incident queries ----------------------------------------------------------------------

    def incident_tasks(self, f: IncidentFilter, *, limit: int = 1000) -> list[IncidentTask]:
        """Every task in the window that used the tool (an effect or an `execute_tool` event),
        was pinned to the prompt / model route / workflow, or had a decision under the policy
        version; with the effects it executed. Oldest first."""
        cond = (tasks.c.created_at < f.until) & (tasks.c.updated_at >= f.since)
        if f.tenant_id is not None:
            cond = cond & (tasks.c.tenant_id == f.tenant_id)
        if f.workflow is not None:
            cond = cond & (
                (tasks.c.workflow == f.workflow)
                if "@" in f.workflow
                else or_(tasks.c.workflow == f.workflow, tasks.c.workflow.like(f"{f.workflow}@%"))
            )
        if f.tool is not None:
            effect_cond = (effects.c.task_id == tasks.c.id) & (effects.c.tool == f.tool)
            if f.tool_version is not None:
                effect_cond = effect_cond & (effects.c.tool_version == f.tool_version)
            event_cond = (task_events.c.task_id == tasks.c.id) & (
                task_events.c.type == f"execute_tool {f.tool}"
            )
            cond = cond & or_(exists().where(effect_cond), exists().where(event_cond))
        cols = [
            tasks.c.id,
            tasks.c.tenant_id,
            tasks.c.workflow,
            tasks.c.status,
            tasks.c.created_at,
            tasks.c.updated_at,
            tasks.c.pinned,
        ]
        out: list[IncidentTask] = []
        with self.engine.connect() as conn:
            q = select(*cols).where(cond).order_by(tasks.c.created_at, tasks.c.id)
            for row in conn.execute(q).mappings():
                pinned = dict(row["pinned"] or {})
                if not _pinned_match(f, pinned):
                    continue
                found = self._incident_one(conn, row, pinned, f)
                if found is not None:
                    out.append(found)
                    if len(out) >= limit:
                        break
            conn.rollback()
        return out

    @staticmethod
    def _incident_one(
        conn: Connection, row: Any, pinned: dict[str, Any], f: IncidentFilter
    ) -> IncidentTask | None:
        task_id = row["id"]
        policies: set[str] = set()
        tools: set[str] = set()
        tool_versions: set[tuple[str, str]] = set()
        events = conn.execute(
            select(task_events.c.type, task_events.c.data).where(task_events.c.task_id == task_id)
        )
        for type_, raw in events:
            data = raw if isinstance(raw, dict) else {}
            pv = data.get("policy_version")
            if isinstance(pv, str) and pv:
                policies.add(pv)
            tool = _tool_of_event(type_)
            if tool is not None:
                tools.add(tool)
                tool_versions.add((tool, str(data.get("tool_version"))))
        done = [
            effect_from_row(r)
            for r in conn.execute(
                select(effects).where(effects.c.task_id == task_id).order_by(effects.c.created_at)
            )
        ]
        versions = {
            (str(r[0]), str(r[1]))
            for r in conn.execute(
                select(effects.c.tool, effects.c.tool_version).where(effects.c.task_id == task_id)
            )
        }
        tools |= {e.tool for e in done}
        tool_versions |= versions
        if f.policy_version is not None and f.policy_version not in policies:
            return None
        wanted = (f.tool, f.tool_version)
        if f.tool is not None and f.tool_version is not None and wanted not in tool_versions:
            return None
        return IncidentTask(
            task_id=task_id,
            tenant_id=row["tenant_id"],
            workflow=row["workflow"],
            status=row["status"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            pinned=pinned,
            policy_versions=sorted(policies),
            tools_used=sorted(tools),
            effects=done,
        )
