"""Releases in the database: stored manifests, what is live per workflow, per-tenant pins and
phases, and the append-only history of every change (who, why, when).

Every change to what is live is one guarded statement plus its history row in one transaction;
a guard that matches nothing raises `ReleaseConflict` (someone else changed it first), never
silently does nothing. Which release a new task gets is `release_for`: the tenant's explicit pin,
else the canary candidate if the tenant's stable bucket falls under the canary's share, else the
incumbent, else none (the workflow's built-in pins).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from agent_jobs.core.errors import AgentJobsError, RecordNotFound
from agent_jobs.store.base import StoreBase
from agent_jobs.store.schema import (
    release_history,
    release_rollouts,
    release_tenants,
    releases,
    tasks,
)
from agent_jobs.store.types import db_now

MODES = ("none", "shadow", "canary")


class ReleaseConflict(AgentJobsError):
    """A release change lost a race or does not apply to the current rollout."""

    code = "release_conflict"


def tenant_bucket(tenant_id: str, workflow: str) -> int:
    """0..99, stable per (tenant, workflow): a canary of N% takes buckets below N, so a tenant
    is in or out for the whole canary and one customer's experience stays consistent."""
    digest = hashlib.sha256(f"{workflow}\x00{tenant_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100


def release_pins(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """What a task created under `manifest` pins on top of its workflow's own pins (nothing
    without a release): every version the manifest names and its flags. The workflow runs the
    pinned route, prompt and tool versions, and decides under the pinned policy bundle with the
    pinned autonomy flag (see `RefundWorkflow.authorize`)."""
    if not manifest:
        return {}
    flags = dict((manifest.get("rollout") or {}).get("flags") or {})
    return {
        "release": manifest["release_id"],
        "model_route": manifest["model_route"],
        "prompt": manifest["prompt"],
        "policy": manifest["policy_bundle"],
        "tools": dict(manifest["tool_schemas"]),
        "retrieval_index": manifest["retrieval_index"],
        "flags": flags,
    }


@dataclass(frozen=True)
class ReleaseRow:
    release_id: str
    workflow: str
    manifest: dict[str, Any]
    created_by: str
    created_at: datetime
    eval_status: str | None
    eval_summary: dict[str, Any] | None


@dataclass(frozen=True)
class RolloutRow:
    workflow: str
    incumbent: str | None
    candidate: str | None
    mode: str
    traffic_percent: int
    updated_by: str
    updated_at: datetime


@dataclass(frozen=True)
class HistoryRow:
    id: int
    workflow: str
    action: str
    release_id: str | None
    actor: str
    reason: str
    data: dict[str, Any] | None
    at: datetime


@dataclass(frozen=True)
class PinnedTask:
    """What guardrails read of one task created under a release."""

    task_id: str
    tenant_id: str
    release: str | None
    status: str
    state: dict[str, Any]
    outcome: dict[str, Any] | None
    created_at: datetime
    # Its last transition: how long a task not finished has not moved (guardrails' "stuck").
    updated_at: datetime


def _release(r: Any) -> ReleaseRow:
    return ReleaseRow(
        r.release_id,
        r.workflow,
        dict(r.manifest),
        r.created_by,
        r.created_at,
        r.eval_status,
        dict(r.eval_summary) if r.eval_summary is not None else None,
    )


def _rollout(r: Any) -> RolloutRow:
    return RolloutRow(
        r.workflow,
        r.incumbent,
        r.candidate,
        r.mode,
        int(r.traffic_percent),
        r.updated_by,
        r.updated_at,
    )


class ReleaseStore(StoreBase):
    # -- manifests ---------------------------------------------------------------------------

    def create_release(self, manifest: dict[str, Any], actor: str) -> tuple[ReleaseRow, bool]:
        """Store a manifest (validated by the caller). The same manifest again is a no-op;
        another manifest under an existing id is a `ReleaseConflict` (ids are never reused)."""
        rid, workflow = str(manifest["release_id"]), str(manifest["workflow"])
        with self.tx() as conn:
            stmt = self.backend.insert_ignore(releases).values(
                release_id=rid,
                workflow=workflow,
                manifest=manifest,
                created_by=actor,
                created_at=db_now(),
            )
            created = conn.execute(stmt.on_conflict_do_nothing()).rowcount == 1
            if created:
                self._history(conn, workflow, "create", rid, actor, "created", None)
            row = conn.execute(select(releases).where(releases.c.release_id == rid)).one()
        found = _release(row)
        if found.manifest != manifest:
            raise ReleaseConflict(f"release {rid} exists with a different manifest")
        return found, created

    def get_release(self, release_id: str) -> ReleaseRow:
        with self.engine.connect() as conn:
            row = conn.execute(select(releases).where(releases.c.release_id == release_id)).first()
        if row is None:
            raise RecordNotFound(f"release {release_id} not found")
        return _release(row)

    def list_releases(self, workflow: str | None = None) -> list[ReleaseRow]:
        q = select(releases).order_by(releases.c.created_at, releases.c.release_id)
        if workflow is not None:
            q = q.where(releases.c.workflow == workflow)
        with self.engine.connect() as conn:
            return [_release(r) for r in conn.execute(q)]

    def record_release_eval(
        self,
        release_id: str,
        passed: bool,
        summary: dict[str, Any],
        actor: str,
        *,
        full: bool = True,
    ) -> None:
        """Record an eval in the history. Only a full eval (the gate's suites, the configured
        runs) becomes the release's eval status, which `promote` reads; a partial one (a subset
        of cases, fewer runs) is history only, so it can neither unlock nor hide a full result."""
        status = ("passed" if passed else "failed") if full else "partial"
        with self.tx() as conn:
            workflow = conn.execute(
                select(releases.c.workflow).where(releases.c.release_id == release_id)
            ).scalar_one_or_none()
            if workflow is None:
                raise RecordNotFound(f"release {release_id} not found")
            if full:
                conn.execute(
                    update(releases)
                    .where(releases.c.release_id == release_id)
                    .values(eval_status=status, eval_summary=summary)
                )
            reason = status if full else f"partial ({'passed' if passed else 'failed'})"
            self._history(conn, workflow, "eval", release_id, actor, reason, summary)

    # -- what is live -----------------------------------------------------------------------

    def rollout(self, workflow: str) -> RolloutRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(release_rollouts).where(release_rollouts.c.workflow == workflow)
            ).first()
        return _rollout(row) if row is not None else None

    def change_rollout(
        self,
        workflow: str,
        *,
        action: str,
        actor: str,
        reason: str,
        expect: RolloutRow | None,
        incumbent: str | None,
        candidate: str | None,
        mode: str,
        traffic_percent: int,
        release_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> RolloutRow:
        """Compare-and-set the workflow's rollout: applies only if it is still `expect` (None:
        there is no row yet). Writes the history row in the same transaction."""
        if mode not in MODES:
            raise ValueError(f"unknown rollout mode {mode!r}")
        values = {
            "incumbent": incumbent,
            "candidate": candidate,
            "mode": mode,
            "traffic_percent": traffic_percent,
            "updated_by": actor,
            "updated_at": db_now(),
        }
        with self.tx() as conn:
            if expect is None:
                stmt = self.backend.insert_ignore(release_rollouts).values(
                    workflow=workflow, **values
                )
                n = conn.execute(stmt.on_conflict_do_nothing()).rowcount
            else:
                c = release_rollouts.c
                n = conn.execute(
                    update(release_rollouts)
                    .where(
                        (c.workflow == workflow)
                        & (c.updated_at == expect.updated_at)
                        & _same(c.incumbent, expect.incumbent)
                        & _same(c.candidate, expect.candidate)
                        & (c.mode == expect.mode)
                    )
                    .values(**values)
                ).rowcount
            if n != 1:
                raise ReleaseConflict(
                    f"the rollout of {workflow} changed meanwhile; {action} not applied"
                )
            self._history(conn, workflow, action, release_id, actor, reason, data)
            row = conn.execute(
                select(release_rollouts).where(release_rollouts.c.workflow == workflow)
            ).one()
        return _rollout(row)

    # -- tenants ----------------------------------------------------------------------------

    def set_tenant_release(
        self,
        tenant_id: str,
        workflow: str,
        *,
        actor: str,
        release_id: str | None = None,
        phase: str | None = None,
        evidence: dict[str, Any] | None = None,
        reason: str = "",
    ) -> None:
        """Pin `tenant_id` to a release (None: follow the rollout) and/or record its phase."""
        with self.tx() as conn:
            key = (release_tenants.c.tenant_id == tenant_id) & (
                release_tenants.c.workflow == workflow
            )
            old = conn.execute(select(release_tenants).where(key)).first()
            pin: str | None = (
                release_id if release_id is not None or old is None else old.release_id
            )
            values: dict[str, Any] = {
                "release_id": pin,
                "phase": phase if phase is not None or old is None else old.phase,
                "evidence": evidence if evidence is not None or old is None else old.evidence,
                "updated_by": actor,
                "updated_at": db_now(),
            }
            if old is None:
                conn.execute(
                    insert(release_tenants).values(tenant_id=tenant_id, workflow=workflow, **values)
                )
            else:
                conn.execute(update(release_tenants).where(key).values(**values))
            action = "tenant_phase" if phase is not None else "tenant_pin"
            data = {"tenant_id": tenant_id, "phase": phase, "evidence": evidence}
            self._history(conn, workflow, action, pin, actor, reason, data)

    def clear_tenant_release(self, tenant_id: str, workflow: str, actor: str) -> None:
        with self.tx() as conn:
            conn.execute(
                update(release_tenants)
                .where(
                    (release_tenants.c.tenant_id == tenant_id)
                    & (release_tenants.c.workflow == workflow)
                )
                .values(release_id=None, updated_by=actor, updated_at=db_now())
            )

    def tenant_release(self, tenant_id: str, workflow: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(release_tenants).where(
                    (release_tenants.c.tenant_id == tenant_id)
                    & (release_tenants.c.workflow == workflow)
                )
            ).first()
        return dict(row._mapping) if row is not None else None

    # -- the release a new task gets --------------------------------------------------------

    def release_for(self, tenant_id: str, workflow: str) -> dict[str, Any] | None:
        """The manifest a task of `tenant_id` created now is pinned to, or None."""
        with self.engine.connect() as conn:
            pinned = conn.execute(
                select(release_tenants.c.release_id).where(
                    (release_tenants.c.tenant_id == tenant_id)
                    & (release_tenants.c.workflow == workflow)
                )
            ).scalar()
            rid = pinned
            if rid is None:
                ro = conn.execute(
                    select(release_rollouts).where(release_rollouts.c.workflow == workflow)
                ).first()
                if ro is not None:
                    rid = ro.incumbent
                    canary = ro.mode == "canary" and ro.candidate is not None
                    if canary and tenant_bucket(tenant_id, workflow) < ro.traffic_percent:
                        rid = ro.candidate
            if rid is None:
                return None
            manifest = conn.execute(
                select(releases.c.manifest).where(releases.c.release_id == rid)
            ).scalar()
        return dict(manifest) if manifest is not None else None

    def release_pins(self, tenant_id: str, workflow: str) -> dict[str, Any]:
        """`release_pins` of the release a new task of `tenant_id` gets (see `release_for`)."""
        return release_pins(self.release_for(tenant_id, workflow))

    # -- evidence ---------------------------------------------------------------------------

    def tasks_since(self, workflow: str, since: datetime, limit: int = 5000) -> list[PinnedTask]:
        """Tasks of `workflow` created since `since` (newest first), with their release pin:
        what guardrails and shadow comparisons are computed from."""
        q = (
            select(
                tasks.c.id,
                tasks.c.tenant_id,
                tasks.c.pinned,
                tasks.c.status,
                tasks.c.state,
                tasks.c.outcome,
                tasks.c.created_at,
                tasks.c.updated_at,
            )
            .where((tasks.c.workflow == workflow) & (tasks.c.created_at >= since))
            .order_by(tasks.c.created_at.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [
            PinnedTask(
                r.id,
                r.tenant_id,
                (r.pinned or {}).get("release"),
                r.status,
                dict(r.state or {}),
                dict(r.outcome) if r.outcome is not None else None,
                r.created_at,
                r.updated_at,
            )
            for r in rows
        ]

    def canary_workflows(self) -> list[str]:
        """Workflows with a canary running: what the guardrails beat checks."""
        c = release_rollouts.c
        q = select(c.workflow).where((c.mode == "canary") & c.candidate.is_not(None))
        with self.engine.connect() as conn:
            return sorted(str(w) for w in conn.execute(q).scalars())

    def release_tasks(
        self,
        release_id: str,
        statuses: tuple[str, ...] = ("ESCALATED", "FAILED"),
        limit: int = 1000,
    ) -> list[PinnedTask]:
        """Tasks created under `release_id` (its pin) in one of `statuses`, oldest first: what a
        bad canary escalated, for `incidents tasks --release` and the replay on the incumbent."""
        release = tasks.c.pinned["release"].as_string()
        q = (
            select(
                tasks.c.id,
                tasks.c.tenant_id,
                tasks.c.status,
                tasks.c.state,
                tasks.c.outcome,
                tasks.c.created_at,
                tasks.c.updated_at,
            )
            .where((release == release_id) & tasks.c.status.in_(statuses))
            .order_by(tasks.c.created_at, tasks.c.id)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [
            PinnedTask(
                r.id,
                r.tenant_id,
                release_id,
                r.status,
                dict(r.state or {}),
                dict(r.outcome) if r.outcome is not None else None,
                r.created_at,
                r.updated_at,
            )
            for r in rows
        ]

    def record_release_event(
        self, workflow: str, action: str, *, release_id: str | None, actor: str, reason: str,
        data: dict[str, Any] | None,
    ) -> None:  # fmt: skip
        """An audit row with no change to what is live (a replay on the incumbent)."""
        with self.tx() as conn:
            self._history(conn, workflow, action, release_id, actor, reason, data)

    def release_history(self, workflow: str | None = None, limit: int = 200) -> list[HistoryRow]:
        q = select(release_history).order_by(release_history.c.id.desc()).limit(limit)
        if workflow is not None:
            q = q.where(release_history.c.workflow == workflow)
        with self.engine.connect() as conn:
            return [
                HistoryRow(
                    r.id,
                    r.workflow,
                    r.action,
                    r.release_id,
                    r.actor,
                    r.reason,
                    dict(r.data) if r.data is not None else None,
                    r.at,
                )
                for r in conn.execute(q)
            ]

    @staticmethod
    def _history(  # noqa: PLR0917 - one row's columns, in the table's order
        conn: Connection,
        workflow: str,
        action: str,
        release_id: str | None,
        actor: str,
        reason: str,
        data: dict[str, Any] | None,
    ) -> None:
        conn.execute(
            insert(release_history).values(
                workflow=workflow,
                action=action,
                release_id=release_id,
                actor=actor,
                reason=reason[:1000],
                data=data,
                at=db_now(),
            )
        )


def _same(column: Any, value: str | None) -> Any:
    return column.is_(None) if value is None else column == value
