"""Rollout: promote, roll back, canary by tenant, guardrails that revert a canary and say why,
and seed 004's phase ladder per tenant with the evidence each gate needs.

A task is pinned at creation to the release it began under (`Orchestrator.submit` asks the store
for `release_pins`), so a promotion or a rollback changes what *new* tasks get; in-flight tasks
finish under their own route and prompt, while policy is evaluated at decision time regardless.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from agent_jobs.releases.manifest import Catalog, Manifest, ReleaseInvalid
from agent_jobs.store.releases import (
    HistoryRow,
    ReleaseConflict,
    ReleaseRow,
    RolloutRow,
    tenant_bucket,
)

__all__ = ["PHASES", "Guardrails", "ReleaseService", "WindowStats", "tenant_bucket"]

# Seed 004's ladder; each step names the evidence its gate needs (from the phase being exited).
PHASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("shadow", {}),
    ("read_only_assistant", {"golden_suite": "pass", "shadow_agreement_min": 0.9}),
    ("bounded_tools", {"factual_accuracy_min": 0.95, "safety_failures_max": 0}),
    ("approved_refunds", {"reconciliation_verified": True, "safety_failures_max": 0}),
    ("bounded_autonomy", {"approval_rejection_rate_max": 0.05, "safety_failures_max": 0}),
)
PHASE_NAMES = tuple(p for p, _ in PHASES)


def gate_problems(phase: str, evidence: dict[str, Any]) -> list[str]:
    """What `evidence` lacks to enter `phase` (empty: the gate passes)."""
    need = dict(PHASES)[phase]
    out = []
    for key, want in need.items():
        have = evidence.get(key.removesuffix("_min").removesuffix("_max"))
        if have is None:
            out.append(f"missing evidence {key.removesuffix('_min').removesuffix('_max')!r}")
        elif key.endswith("_min") and float(have) < float(want):
            out.append(f"{key}: {have} < {want}")
        elif key.endswith("_max") and float(have) > float(want):
            out.append(f"{key}: {have} > {want}")
        elif not key.endswith(("_min", "_max")) and have != want:
            out.append(f"{key}: {have!r} != {want!r}")
    return out


@dataclass(frozen=True)
class WindowStats:
    """Online figures of one release's tasks over a window."""

    tasks: int
    escalation_rate: float
    denied_proposal_rate: float
    verified_success_rate: float
    cost_per_task: float
    # Of `tasks`, those not finished that have not moved for `Guardrails.stuck_after_s`: counted
    # in `escalation_rate` as failures, or a canary whose tasks park forever would look clean.
    stuck: int = 0


@dataclass(frozen=True)
class Guardrails:
    """A breach of any of these by the candidate, against the incumbent, reverts the canary."""

    window_s: float = 3600.0
    min_tasks: int = 5
    max_escalation_increase: float = 0.10
    max_denied_increase: float = 0.10
    max_success_drop: float = 0.10
    max_cost_ratio: float = 1.25
    # Seconds without a transition after which a task not finished is stuck (a failure); None:
    # `AGENT_JOBS_CANARY_STUCK_AFTER_S`.
    stuck_after_s: float | None = None

    def breaches(self, candidate: WindowStats, incumbent: WindowStats) -> list[str]:
        if candidate.tasks < self.min_tasks:
            return []
        out = []
        if candidate.escalation_rate - incumbent.escalation_rate > self.max_escalation_increase:
            stuck = f" ({candidate.stuck} stuck)" if candidate.stuck else ""
            out.append(
                f"escalation rate {candidate.escalation_rate:.2f}{stuck} "
                f"vs {incumbent.escalation_rate:.2f}"
            )
        if (
            candidate.denied_proposal_rate - incumbent.denied_proposal_rate
            > self.max_denied_increase
        ):
            out.append(
                f"denied-proposal rate {candidate.denied_proposal_rate:.2f} vs "
                f"{incumbent.denied_proposal_rate:.2f}"
            )
        if (
            incumbent.verified_success_rate - candidate.verified_success_rate
            > self.max_success_drop
        ):
            out.append(
                f"verified success rate {candidate.verified_success_rate:.2f} vs "
                f"{incumbent.verified_success_rate:.2f}"
            )
        if incumbent.cost_per_task > 0 and (
            candidate.cost_per_task / incumbent.cost_per_task > self.max_cost_ratio
        ):
            out.append(
                f"cost per task {candidate.cost_per_task:.3f} vs {incumbent.cost_per_task:.3f}"
            )
        return out


_FINISHED = {"COMPLETED", "ESCALATED", "FAILED", "CANCELLED"}
# Waiting for a person, not for the release: its approval's expiry moves it, and a slow
# approver says nothing about the candidate.
_NEVER_STUCK = {"APPROVAL_WAIT"}


def is_stuck(task: Any, now: datetime, stuck_after_s: float) -> bool:
    """Not finished, not waiting for a person, and no transition for `stuck_after_s`: parked
    past the bound (a timer that keeps re-parking it, a hold that never lifts, an unknown outcome
    never resolved) or a lease that keeps lapsing."""
    if task.status in _FINISHED or task.status in _NEVER_STUCK:
        return False
    return bool((now - task.updated_at).total_seconds() >= stuck_after_s)


def window_stats(
    tasks: list[Any], now: datetime | None = None, stuck_after_s: float | None = None
) -> WindowStats:
    """The figures of finished tasks and stuck ones (when `now` and `stuck_after_s` are given);
    a stuck task counts as an escalation, not as a success nor a cost."""
    stuck = (
        []
        if now is None or stuck_after_s is None
        else [t for t in tasks if is_stuck(t, now, stuck_after_s)]
    )
    done = [t for t in tasks if t.status in _FINISHED]
    n = len(done) + len(stuck)
    if n == 0:
        return WindowStats(0, 0.0, 0.0, 0.0, 0.0)
    escalated = sum(t.status in ("ESCALATED", "FAILED") for t in done) + len(stuck)
    denied = sum(
        any(
            e.get("kind") == "gate" and e.get("decision") == "deny"
            for e in t.state.get("history") or []
        )
        for t in done
    )
    verified = sum(
        t.status == "COMPLETED"
        and (t.outcome or {}).get("verified", not (t.outcome or {}).get("refund_id")) is True
        for t in done
    )
    cost = sum(
        Decimal(str(((t.state.get("model") or {}).get("usage") or {}).get("cost") or 0))
        for t in done
    )
    return WindowStats(n, escalated / n, denied / n, verified / n, float(cost) / n, len(stuck))


class ReleaseService:
    """The release operations the CLI (and, later, the API and console) call."""

    def __init__(
        self, store: Any, catalog: Catalog | None = None, *, eval_runs: int | None = None
    ) -> None:
        self.store = store
        self._catalog = catalog
        # Runs per case a full eval needs to unlock promote (AGENT_JOBS_RELEASE_EVAL_RUNS).
        self._eval_runs = eval_runs

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = Catalog.current()
        return self._catalog

    def create(self, data: dict[str, Any], actor: str) -> tuple[ReleaseRow, bool]:
        """Store a manifest after both checks (its shape, and that this deployment ships every
        version it names)."""
        manifest = self.catalog.check(Manifest.parse(data))
        return self.store.create_release(manifest.to_json(), actor)  # type: ignore[no-any-return]

    @property
    def eval_runs(self) -> int:
        if self._eval_runs is None:
            from agent_jobs.config import load_settings  # noqa: PLC0415

            self._eval_runs = load_settings().release_eval_runs
        return self._eval_runs

    def manifest(self, release_id: str) -> Manifest:
        return Manifest.parse_stored(self.store.get_release(release_id).manifest)

    def record_eval(self, report: dict[str, Any], actor: str) -> bool:
        """Store a gate report (`evals.gate.evaluate`); whether it unlocks promote."""
        from agent_jobs.evals import gate  # noqa: PLC0415

        full = gate.counts_for_promote(report, self.eval_runs)
        passed = report["overall"]["gate"] == "pass"
        self.store.record_release_eval(
            report["release_id"], passed, gate.summary(report), actor, full=full
        )
        return full and passed

    def _rollout(self, workflow: str) -> RolloutRow | None:
        return self.store.rollout(workflow)  # type: ignore[no-any-return]

    def promote_problems(
        self, row: ReleaseRow, manifest: Manifest, history: list[HistoryRow] | None = None
    ) -> list[str]:
        """Why `promote` would refuse this release now (`evals.gate.promote_problems`), naming
        the subset evals in its workflow's `history` (read when not given) when none is full."""
        from agent_jobs.evals.gate import partial_evals, promote_problems  # noqa: PLC0415

        partial = 0
        if row.eval_status is None:  # none full: were there subset ones? (say so, not "not run")
            if history is None:
                history = self.store.release_history(row.workflow)
            partial = partial_evals(history, row.release_id)
        return promote_problems(
            manifest, row.eval_status, row.eval_summary, self.eval_runs, partial
        )

    def promote(
        self, release_id: str, actor: str, reason: str, *, force: bool = False
    ) -> RolloutRow:
        """Make `release_id` the incumbent of its workflow: every new task gets it."""
        row = self.store.get_release(release_id)
        manifest = Manifest.parse_stored(row.manifest)
        problems = self.promote_problems(row, manifest)
        if problems and not force:
            raise ReleaseInvalid(problems, "promote refused")
        self.catalog.check(manifest)  # still deployable here
        cur = self._rollout(row.workflow)
        return self.store.change_rollout(  # type: ignore[no-any-return]
            row.workflow,
            action="promote",
            actor=actor,
            reason=reason,
            expect=cur,
            incumbent=release_id,
            candidate=None,
            mode="none",
            traffic_percent=0,
            release_id=release_id,
            data={
                "previous": cur.incumbent if cur else None,
                "manifest_hash": manifest.content_hash(),
                # Forced past the gate: what it would have refused, on the record.
                "forced_past": problems if force else [],
            },
        )

    def rollback(self, workflow: str, actor: str, reason: str) -> RolloutRow:
        """Back to the incumbent before the current one (from the history). In-flight tasks keep
        the release they were pinned to; only new tasks change."""
        cur = self._rollout(workflow)
        if cur is None or cur.incumbent is None:
            raise ReleaseConflict(f"{workflow} has no release to roll back from")
        previous = None
        for h in self.store.release_history(workflow):
            if h.action in ("promote", "rollback") and h.release_id == cur.incumbent:
                previous = (h.data or {}).get("previous")
                break
        return self.store.change_rollout(  # type: ignore[no-any-return]
            workflow,
            action="rollback",
            actor=actor,
            reason=reason,
            expect=cur,
            incumbent=previous,
            candidate=None,
            mode="none",
            traffic_percent=0,
            release_id=previous,
            data={"previous": None, "from": cur.incumbent},
        )

    def start(
        self, release_id: str, mode: str, percent: int, actor: str, reason: str
    ) -> RolloutRow:
        """Put `release_id` in shadow (no traffic) or canary (`percent` of tenants, by bucket)."""
        row = self.store.get_release(release_id)
        cur = self._rollout(row.workflow)
        return self.store.change_rollout(  # type: ignore[no-any-return]
            row.workflow,
            action=f"start_{mode}",
            actor=actor,
            reason=reason,
            expect=cur,
            incumbent=cur.incumbent if cur else None,
            candidate=release_id,
            mode=mode,
            traffic_percent=percent if mode == "canary" else 0,
            release_id=release_id,
            data={"traffic_percent": percent},
        )

    def stats(
        self, workflow: str, window_s: float, stuck_after_s: float | None = None
    ) -> dict[str | None, WindowStats]:
        """Each release's figures over the tasks created in the last `window_s` (by the
        database's clock), counting those not moved for `stuck_after_s` as stuck."""
        now = self.store.db_now()
        since = now - timedelta(seconds=window_s)
        by_release: dict[str | None, list[Any]] = {}
        for t in self.store.tasks_since(workflow, since):
            by_release.setdefault(t.release, []).append(t)
        return {rid: window_stats(ts, now, stuck_after_s) for rid, ts in by_release.items()}

    @staticmethod
    def stuck_after_s(g: Guardrails) -> float:
        if g.stuck_after_s is not None:
            return g.stuck_after_s
        from agent_jobs.config import load_settings  # noqa: PLC0415

        return float(load_settings().canary_stuck_after_s)

    def check_guardrails(
        self, workflow: str, guardrails: Guardrails | None = None, actor: str = "guardrails"
    ) -> dict[str, Any]:
        """Compare the canary's window with the incumbent's; on a breach, revert the canary
        (guarded on it still being this canary) and record why."""
        g = guardrails or Guardrails()
        cur = self._rollout(workflow)
        if cur is None or cur.mode != "canary" or cur.candidate is None:
            return {"canary": None, "reverted": False, "breaches": []}
        stats = self.stats(workflow, g.window_s, self.stuck_after_s(g))
        empty = WindowStats(0, 0.0, 0.0, 0.0, 0.0)
        cand, inc = stats.get(cur.candidate, empty), stats.get(cur.incumbent, empty)
        breaches = g.breaches(cand, inc)
        result = {
            "canary": cur.candidate,
            "candidate": asdict(cand),
            "incumbent": asdict(inc),
            "breaches": breaches,
            "reverted": False,
        }
        if breaches:
            self.store.change_rollout(
                workflow,
                action="auto_revert",
                actor=actor,
                reason="guardrail breach: " + "; ".join(breaches),
                expect=cur,
                incumbent=cur.incumbent,
                candidate=None,
                mode="none",
                traffic_percent=0,
                release_id=cur.candidate,
                data=result,
            )
            result["reverted"] = True
        return result

    def check_all_guardrails(
        self, guardrails: Guardrails | None = None, actor: str = "guardrails"
    ) -> dict[str, dict[str, Any]]:
        """`check_guardrails` for every workflow with a canary running (what beat runs every
        `AGENT_JOBS_GUARDRAILS_INTERVAL_S`). A canary changed meanwhile is skipped: the next
        run sees the new one."""
        out = {}
        for workflow in self.store.canary_workflows():
            try:
                out[workflow] = self.check_guardrails(workflow, guardrails, actor)
            except ReleaseConflict as exc:
                out[workflow] = {"skipped": str(exc), "reverted": False, "breaches": []}
        return out

    def escalated_tasks(self, release_id: str, limit: int = 1000) -> list[Any]:
        """The tasks created under `release_id` that escalated or failed (its exposure)."""
        self.store.get_release(release_id)  # an unknown release is RecordNotFound, not []
        return self.store.release_tasks(release_id, limit=limit)  # type: ignore[no-any-return]

    def replay_on_incumbent(
        self, orchestrator: Any, task_id: str, actor: str, reason: str
    ) -> tuple[Any, bool]:
        """Create a new task from the input of `task_id` (escalated or failed under a release
        that is not the incumbent), pinned to its workflow's incumbent; (the task, created).
        Once: the new task's idempotency key is derived from `task_id`, so a second replay finds
        the first and is refused (`created` False), whoever asks. Audited in the history."""
        from agent_jobs.core.contracts import TaskRequest  # noqa: PLC0415

        task = self.store.get(task_id)
        pinned_to = (task.pinned or {}).get("release")
        if task.status.value not in ("ESCALATED", "FAILED"):
            raise ReleaseConflict(f"task {task_id} is {task.status.value}, not escalated")
        cur = self._rollout(task.workflow)
        incumbent = cur.incumbent if cur else None
        if pinned_to is None or pinned_to == incumbent:
            raise ReleaseConflict(
                f"task {task_id} ran on the incumbent ({incumbent or 'built-in pins'}): "
                "nothing to replay it on"
            )
        if self.store.release_pins(task.tenant_id, task.workflow).get("release") != incumbent:
            raise ReleaseConflict(
                f"a new task of {task.tenant_id} would not run on the incumbent {incumbent} "
                "(a canary or a tenant pin still routes it elsewhere): revert that first"
            )
        request = TaskRequest(workflow=task.workflow, input=dict(task.input))
        created = orchestrator.submit(
            task.tenant_id, f"release-replay:{task_id}", request, requester=actor, via="replay"
        )
        if created.created:
            self.store.record_release_event(
                task.workflow,
                "replay",
                release_id=incumbent,
                actor=actor,
                reason=reason,
                data={
                    "task_id": task_id,
                    "from": pinned_to,  # the API lists it in that release's audit trail too
                    "replay_task_id": created.task.id,
                },
            )
        return created.task, bool(created.created)

    def set_phase(
        self, tenant_id: str, workflow: str, phase: str, evidence: dict[str, Any], actor: str
    ) -> None:
        """Move a tenant along the ladder: forward one step only with the gate's evidence;
        back (a failed gate rolls back) at any time."""
        if phase not in PHASE_NAMES:
            raise ReleaseInvalid(
                [f"unknown phase {phase!r}; known: {', '.join(PHASE_NAMES)}"], "phase refused"
            )
        current = (self.store.tenant_release(tenant_id, workflow) or {}).get("phase") or "shadow"
        i, j = PHASE_NAMES.index(current), PHASE_NAMES.index(phase)
        if j > i + 1:
            raise ReleaseInvalid(
                [f"{tenant_id} is in {current}: the next phase is {PHASE_NAMES[i + 1]}"],
                "phase refused",
            )
        if j == i + 1:
            problems = gate_problems(phase, evidence)
            if problems:
                raise ReleaseInvalid(problems, "phase refused")
        self.store.set_tenant_release(
            tenant_id,
            workflow,
            actor=actor,
            phase=phase,
            evidence=evidence,
            reason=f"phase {phase}",
        )
