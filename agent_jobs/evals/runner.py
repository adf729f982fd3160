"""The runner: a suite on real workers against the simulator, each case N times.

It builds a throwaway environment (SQLite in a temporary directory, the in-process broker, an
embedded Celery worker on threads, the simulator over HTTP on loopback), stores one release per
model variant and pins an eval tenant to each, so a case's model is chosen exactly as production
chooses one: by the release its task was created under. Cases without faults or hooks share the
simulator (their order ids differ) and run concurrently; the others run alone.

Given a candidate manifest (the release gate, `evals.gate`), every release is the candidate:
its prompt, tool versions, policy bundle and flags; the honest-model cases run its own model
route (resolved from the routes the gate hands over), and the adversarial-model cases run the
candidate with only the route swapped for the adversary's, so they test the candidate's controls.

In `strict` mode (the gate's own process) the environment must be the process's only one: it
refuses to start when the process already has a runtime or a Celery app bound to other settings
(a CLI command that read the production store first), since its tasks and worker would then be
production's.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.evals import models
from agent_jobs.evals.scoring import Observed, Score, overall, score, summarise
from agent_jobs.evals.suites import Case, Fault, Suite
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer

REQUESTER = "eval-runner"
APPROVER = "eval-lead"
WORKFLOW = "refund_resolution@3"
_TERMINAL = {s.value for s in TERMINAL}
Progress = Callable[[str], None]


def tenant_for(variant: str) -> str:
    return f"eval-{variant.replace('_', '-')}"


# The only settings a caller may hand the throwaway worker: how fast failed steps retry.
PACING_VARIABLES = frozenset({"AGENT_JOBS_RETRY_BASE_S", "AGENT_JOBS_RETRY_MAX_S"})


class EvalNotIsolated(RuntimeError):
    """The eval would share this process's production runtime or broker."""


def release_manifest(variant: str, suite_key: str = "golden-refund@2") -> dict[str, Any]:
    """The release an eval tenant runs under: the shipped versions, `variant`'s model route."""
    from agent_jobs.policy.bundles import CURRENT  # noqa: PLC0415
    from agent_jobs.workflows.refund import PROMPT_VERSION, TOOL_VERSIONS  # noqa: PLC0415

    return {
        "release_id": f"eval-{variant.replace('_', '-')}",
        "model_route": models.route_key(variant),
        "prompt": PROMPT_VERSION,
        "tool_schemas": dict(TOOL_VERSIONS),
        "workflow": WORKFLOW,
        "policy_bundle": CURRENT,
        "retrieval_index": "policy-kb@2026-03-10",
        "eval_suite": suite_key,
        "rollout": {"flags": {"auto_execute_under_minor": 0}},
    }


def candidate_release(candidate: dict[str, Any], variant: str) -> dict[str, Any]:
    """The release an eval tenant runs under when the gate evaluates `candidate`: the candidate
    itself for the honest-model cases; for an adversarial model, the candidate with only its
    route swapped (its id suffixed), so those cases test the candidate's policy and flags."""
    if variant == "honest":
        return dict(candidate)
    rid = f"{str(candidate['release_id'])[:48]}.{variant.replace('_', '-')}"
    return {**candidate, "release_id": rid, "model_route": models.route_key(variant)}


@dataclass
class _Run:
    case: Case
    run: int
    key: str
    tenant: str
    task_id: str = ""
    started: float = 0.0
    ended: float = 0.0


class EvalEnvironment:
    """The simulator, a throwaway database and broker, an embedded worker; one per suite run."""

    def __init__(
        self,
        *,
        concurrency: int = 4,
        progress: Progress | None = None,
        release: tuple[dict[str, Any], str] | None = None,
        candidate: dict[str, Any] | None = None,
        routes: dict[str, Any] | None = None,
        strict: bool = False,
        pacing: dict[str, str] | None = None,
    ) -> None:
        # `pacing`: retry backoff variables for the throwaway worker (tests shorten it; how
        # long a retry waits is not what a suite judges).
        self.pacing = {k: v for k, v in (pacing or {}).items() if k in PACING_VARIABLES}
        # `strict`: refuse to run unless the runtime and broker are provably the throwaway
        # ones (the gate's own process sets it; in-process callers such as shadow do not yet).
        self.strict = strict
        # `release`: (manifest, tenant): one more release, pinned for that tenant (shadow).
        self.extra_release = release
        # `candidate`: the manifest every eval tenant's release is built from (the gate);
        # `routes`: the routes file the worker loads (default: the eval models' routes).
        self.candidate = candidate
        self.routes = routes
        self.concurrency = concurrency
        self.progress = progress or (lambda _msg: None)
        self._stack: list[Any] = []
        self.last_runs: list[_Run] = []

    def __enter__(self) -> EvalEnvironment:
        from agent_jobs.demo.harness import DemoEnv  # noqa: PLC0415

        # Not imported otherwise: the Celery app reads its broker when first imported, which
        # must be after the environment below is set.
        if self.strict and _has_runtime():
            raise EvalNotIsolated(
                "this process already has a runtime (its own store and broker): an eval here "
                "would write to them; run it in a process of its own (`evals.gate`)"
            )
        from agent_jobs.tools.refund_tools import (  # noqa: PLC0415
            ORDERS_URL,
            PAYMENTS_URL,
            POLICIES_URL,
        )
        from agent_jobs.workflows.refund import MODEL_ROUTES, SYSTEMS_URL  # noqa: PLC0415

        self.sim = SimServer(worlds.empty()).__enter__()
        self._stack.append(self.sim)
        self._dir = tempfile.TemporaryDirectory(prefix="agent-jobs-eval-")
        routes = Path(self._dir.name) / "routes.json"
        routes_data = self.routes if self.routes is not None else models.routes_file_data()
        routes.write_text(json.dumps(routes_data), encoding="utf-8")
        url = self.sim.base_url
        extra = {
            SYSTEMS_URL: url,
            ORDERS_URL: url,
            PAYMENTS_URL: url,
            POLICIES_URL: url,
            MODEL_ROUTES: str(routes),
            "AGENT_JOBS_TOOL_SECRET": "eval-only-tool-secret",
            "AGENT_JOBS_CONFIRM_LAG_S": "2",
            **self.pacing,
        }
        self.env = DemoEnv(extra=extra, lease_ttl_s=5.0).__enter__()
        self._stack.append(self.env)
        # Imported after the environment is set: the Celery config is read at import.
        from agent_jobs.queue.embedded import EmbeddedWorker  # noqa: PLC0415
        from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
        from agent_jobs.store.engine import make_engine  # noqa: PLC0415
        from agent_jobs.store.migrate import upgrade  # noqa: PLC0415

        # The schema first: building the runtime reads the operator switches.
        first = make_engine(self.env.env["AGENT_JOBS_DATABASE_URL"])
        try:
            upgrade(first)
        finally:
            first.dispose()
        self.rt = get_runtime()
        if self.strict:
            self._check_isolated()
        self.store = self.rt.store
        self.orch = self.rt.orchestrator
        self._setup_releases()
        if self.extra_release is not None:
            self.store.create_release(self.extra_release[0], REQUESTER)
            self.store.set_tenant_release(
                self.extra_release[1],
                WORKFLOW,
                actor=REQUESTER,
                release_id=self.extra_release[0]["release_id"],
            )
        self.worker = EmbeddedWorker(concurrency=self.concurrency).__enter__()
        self._stack.append(self.worker)
        return self

    def __exit__(self, *exc: Any) -> None:
        from agent_jobs.queue.runtime import set_runtime  # noqa: PLC0415

        try:
            while self._stack:
                self._stack.pop().__exit__(None, None, None)
        finally:
            self.rt.store.dispose()
            set_runtime(None)  # the next runtime is built from the restored environment
            self._dir.cleanup()

    def _check_isolated(self) -> None:
        """The runtime and the Celery app are the throwaway ones, or nothing runs."""
        from agent_jobs.queue.app import app  # noqa: PLC0415

        want = self.env.env["AGENT_JOBS_DATABASE_URL"]
        broker = str(app.conf.broker_url or "")
        if self.rt.settings.database_url != want or not broker.startswith("memory://"):
            raise EvalNotIsolated(
                "the eval's runtime is not its throwaway one (the Celery app was configured "
                "before the eval's environment): run it in a process of its own (`evals.gate`)"
            )

    def _setup_releases(self) -> None:
        from agent_jobs.releases import Catalog, Manifest  # noqa: PLC0415

        catalog = Catalog.current()
        for variant in models.VARIANTS:
            data = (
                release_manifest(variant)
                if self.candidate is None
                else candidate_release(self.candidate, variant)
            )
            manifest = catalog.check(Manifest.parse(data))
            self.store.create_release(manifest.to_json(), REQUESTER)
            self.store.set_tenant_release(
                tenant_for(variant), WORKFLOW, actor=REQUESTER, release_id=manifest.release_id
            )

    # -- one batch --------------------------------------------------------------------------

    def run_batch(self, batch: list[tuple[Case, int]], timeout_s: float = 180.0) -> list[Score]:
        admin = self.sim.admin
        admin.reset()
        admin.load(_merge([c.world for c, _ in batch]))
        self._arm(f for c, _ in batch for f in c.faults if f.at == "submit")
        tag = uuid.uuid4().hex[:8]
        runs = [
            _Run(c, r, f"eval-{tag}-{c.name}-r{r}"[:200], c.tenant or tenant_for(c.model))
            for c, r in batch
        ]
        self.last_runs = runs
        for run in runs:
            request = TaskRequest(
                workflow=WORKFLOW, input={"message": run.case.text, "channel": "chat"}
            )
            run.started = time.monotonic()
            created = self.orch.submit(run.tenant, run.key, request, requester=REQUESTER)
            run.task_id = created.task.id
            if run.case.hook == "duplicate_delivery":
                again = self.orch.submit(run.tenant, run.key, request, requester=REQUESTER)
                assert again.task.id == run.task_id
                from agent_jobs.store import Dispatch  # noqa: PLC0415

                self.orch.publisher.publish(Dispatch(run.task_id, run.tenant))
        deadline = time.monotonic() + timeout_s
        self._wait(runs, deadline)
        for run in runs:
            if run.case.hook == "stale_approval":
                self._expire_pending(run, deadline)
        self._arm(f for c, _ in batch for f in c.faults if f.at == "approve")
        for _ in range(3):  # a re-approval (expired grant, changed policy) asks again
            pending = [r for r in runs if (r.case.approve or r.case.hook) and self._pending(r)]
            if not pending:
                break
            for run in pending:
                for ap in self._pending(run):
                    self.orch.decide_approval(
                        ap.approval_id,
                        APPROVER,
                        grant=run.case.approve and run.case.hook != "reject",
                        note="eval",
                    )
            self._wait(runs, deadline)
        world = admin.dump()
        log = admin.requests()
        return [score(r.case, self._observe(r, world, log)) for r in runs]

    def _arm(self, faults: Iterable[Fault]) -> None:
        for f in faults:
            self.sim.admin.arm(f.operation, f.fault, times=f.times, delay_s=f.delay_s)

    def _pending(self, run: _Run) -> list[Any]:
        return list(self.store.list_approvals(run.tenant, status="pending", task_id=run.task_id))

    def _settled(self, run: _Run) -> bool:
        task = self.store.get(run.task_id)
        if task.status.value in _TERMINAL:
            if not run.ended:
                run.ended = time.monotonic()
            return True
        return task.status is Status.APPROVAL_WAIT and bool(self._pending(run))

    def _wait(self, runs: list[_Run], deadline: float) -> None:
        while time.monotonic() < deadline:
            if all(self._settled(r) for r in runs):
                return
            time.sleep(0.05)

    def _expire_pending(self, run: _Run, deadline: float) -> None:
        """A stale approval: the grant window passes before the lead acts (rewritten in SQL,
        never slept through); the task must ask again for the same exact action."""
        first = self._pending(run)
        if not first:
            return
        self.store.lapse_approval(first[0].approval_id)
        while time.monotonic() < deadline:
            now = self._pending(run)
            if now and now[0].approval_id != first[0].approval_id:
                return
            if self.store.get(run.task_id).status.value in _TERMINAL:
                return
            time.sleep(0.05)

    # -- what a run left behind -------------------------------------------------------------

    def _observe(self, run: _Run, world: dict[str, Any], log: list[dict[str, Any]]) -> Observed:
        case = run.case
        task = self.store.get(run.task_id)
        outcome = dict(task.outcome or {})
        state = dict(task.state or {})
        proposed = [
            (str(call.get("tool")), dict(call.get("args") or {}))
            for e in state.get("history") or []
            if e.get("kind") == "model"
            for call in (e.get("proposal") or {}).get("calls") or []
        ]
        mine = case.payment_ids
        refunds = [
            (str(r["payment_id"]), int(r["amount_minor"]))
            for r in world["refunds"]
            if r["payment_id"] in mine
            or str(r.get("idempotency_key", "")).startswith(f"refund:{run.key}:")
        ]
        ours = [
            e
            for e in log
            if _mentions(e, {case.order_id, *mine}) or run.key in str(e.get("idempotency_key"))
        ]
        sent = [
            dict(e["body"])
            for e in ours
            if e.get("operation") == "refunds.create"
            and isinstance(e.get("body"), dict)
            and e.get("status") in (200, 201, None)
            and e.get("outcome") != "in_flight"
        ]
        foreign = sorted(
            {x for e in log for x in case.expect.foreign_ids if _mentions(e, {x})}
            | {
                x
                for r in world["refunds"]
                for x in case.expect.foreign_ids
                if r["payment_id"] == x and r.get("idempotency_key", "").startswith("refund:eval-")
            }
        )
        reply = str(outcome.get("reply") or "")
        text = reply + json.dumps([e.get("body") for e in ours], default=str)
        leaked = [s for s in case.expect.secrets if s in text]
        usage = (state.get("model") or {}).get("usage") or {}
        approvals = self.store.list_approvals(run.tenant, task_id=run.task_id)
        return Observed(
            status=task.status.value,
            outcome=outcome,
            proposed=proposed,
            refunds=refunds,
            sent_refunds=sent,
            foreign_touched=foreign,
            leaked=leaked,
            approvals=len(approvals),
            granted=sum(a.status in ("granted", "used") for a in approvals),
            cost_inr=float(Decimal(str(usage.get("cost") or 0))),
            latency_s=(run.ended or time.monotonic()) - run.started,
            model_calls=int(usage.get("calls") or 0),
        )


def _has_runtime() -> bool:
    from agent_jobs.queue import runtime  # noqa: PLC0415

    return runtime._runtime is not None  # no public "is one built?" yet


def _mentions(entry: dict[str, Any], ids: set[str]) -> bool:
    blob = json.dumps([entry.get("path"), entry.get("query"), entry.get("body")], default=str)
    return any(i and i in blob for i in ids)


def _merge(worlds_: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(worlds_[0]))
    for w in worlds_[1:]:
        for k in ("orders", "payments", "refunds"):
            out[k] += json.loads(json.dumps(w[k]))
    return out


def plan(cases: Iterable[Case], runs: int, batch_size: int = 16) -> list[list[tuple[Case, int]]]:
    """Batches: a batchable case shares the sim with others of the same policies and distinct
    orders; every other case runs alone."""
    batches: list[list[tuple[Case, int]]] = []
    open_: dict[str, list[tuple[Case, int]]] = {}
    for r in range(runs):
        for case in cases:
            if not case.batchable:
                batches.append([(case, r)])
                continue
            key = json.dumps(case.world["policies"], sort_keys=True)
            cur = open_.get(key)
            orders = {c.order_id for c, _ in cur or []} | {
                str(o["order_id"]) for c, _ in cur or [] for o in c.world["orders"]
            }
            mine = {str(o["order_id"]) for o in case.world["orders"]}
            if cur is None or len(cur) >= batch_size or orders & mine:
                cur = []
                open_[key] = cur
                batches.append(cur)
            cur.append((case, r))
    return batches


def run_suite(
    suite: Suite,
    *,
    runs: int = 5,
    only: Iterable[str] | None = None,
    limit: int | None = None,
    concurrency: int = 4,
    progress: Progress | None = None,
    candidate: dict[str, Any] | None = None,
    routes: dict[str, Any] | None = None,
    strict: bool = False,
    pacing: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run `suite` and return its report (JSON-able): per case over N runs, and overall.
    `candidate` and `routes`: see `EvalEnvironment` (the release gate passes both)."""
    say = progress or (lambda _m: None)
    names = set(only or [])
    cases = [c for c in suite.cases if not names or c.name in names]
    if limit is not None:
        cases = cases[:limit]
    if not cases:
        raise ValueError(f"no case of {suite.key} matches {sorted(names)}")
    started = time.time()
    t0 = time.monotonic()
    scores: dict[str, list[Score]] = {c.name: [] for c in cases}
    with EvalEnvironment(
        concurrency=concurrency,
        progress=say,
        candidate=candidate,
        routes=routes,
        strict=strict,
        pacing=pacing,
    ) as env:
        batches = plan(cases, runs)
        for i, batch in enumerate(batches, 1):
            for (case, _), s in zip(batch, env.run_batch(batch), strict=True):
                scores[case.name].append(s)
                if not s.passed:
                    say(f"FAIL {case.name}: {'; '.join(s.failures)}")
            say(f"batch {i}/{len(batches)} done ({len(batch)} runs)")
    per_case = [summarise(c.name, c.safety, scores[c.name]) for c in cases]
    return {
        "suite": suite.key,
        "runs_per_case": runs,
        "started_at": started,
        "duration_s": round(time.monotonic() - t0, 2),
        "overall": overall(per_case),
        "cases": per_case,
    }
