"""The release gate: `agent-jobs release eval ID` judges the candidate it names, and nothing else.

The suites run on the candidate's manifest (`runner.candidate_release`): its model route, as the
deployment's routes file defines it (so a candidate naming a broken or adversarial provider
really calls it), its prompt, tool versions, policy bundle and flags. They run in a process of
their own, started with none of this process's `AGENT_JOBS_*` variables: a throwaway SQLite
store, the in-memory broker, an embedded worker and the simulator. Nothing is written to the
production database and nothing is published where production workers consume; the only thing
the caller keeps is the report, which names the manifest's content hash.

`promote` asks `promote_problems`: a passed eval of that exact hash, over every case of the
golden and safety suites (and the manifest's own suite), with at least the configured number of
runs (`AGENT_JOBS_RELEASE_EVAL_RUNS`). A subset (`--case`, `--limit`, fewer runs) is recorded in
the history but unlocks nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_jobs.core.errors import ConfigError
from agent_jobs.evals import models
from agent_jobs.evals.child import (
    ChildTimedOut,
    GateError,
    child_environ,
    run_child,
    write_output,
)
from agent_jobs.evals.scoring import errored, overall
from agent_jobs.evals.suites import suite
from agent_jobs.gateway.routes import DEFAULT_ROUTE_CONFIG, load_routes
from agent_jobs.releases.manifest import Manifest

Json = dict[str, Any]
Progress = Callable[[str], None]

__all__ = ["ChildTimedOut", "GateError", "child_environ", "evaluate", "shadow"]

# The suites every release is judged on, beside the one its manifest names.
GATE_SUITES = ("golden-refund", "safety")


def gate_suites(manifest: Manifest) -> list[str]:
    """The suites (`name@version`) a full eval of `manifest` runs: its own, golden and safety."""
    try:
        keys = [manifest.eval_suite, *(suite(name).key for name in GATE_SUITES)]
        return list(dict.fromkeys(suite(k).key for k in keys))
    except KeyError as exc:
        raise GateError(str(exc.args[0] if exc.args else exc)) from None


def _routes_data(path: str | None) -> Json:
    if not path:
        return {"routes": [DEFAULT_ROUTE_CONFIG]}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read the deployment's routes file {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        data = {"routes": list(data)}
    return dict(data)


def eval_routes(manifest: Manifest, routes_path: str | None) -> Json:
    """The routes file the eval worker loads: the eval models' routes, plus the candidate's
    route exactly as the deployment's routes file (`routes_path`) defines it, with the
    providers it names. A route the deployment does not define is a `GateError`."""
    deployed = _routes_data(routes_path)
    entries = [dict(r) for r in deployed.get("routes") or []]
    by_key = {f"{r.get('name')}@{r.get('version')}": r for r in entries}
    route = by_key.get(manifest.model_route)
    if route is None:
        raise GateError(
            f"model route {manifest.model_route!r} is not in this deployment's routes "
            f"({routes_path or 'built-in'}): known {', '.join(sorted(by_key))}"
        )
    load_routes([route])  # invalid here fails here, not in the child
    out = models.routes_file_data()
    providers: Json = dict(out["providers"])
    deployed_providers = dict(deployed.get("providers") or {})
    for target in (route.get("primary") or {}, route.get("fallback") or {}):
        name = str(target.get("provider") or "")
        if not name or name == "scripted":
            continue
        if name not in deployed_providers:
            raise GateError(f"route {manifest.model_route} names provider {name!r}, not defined")
        if name in providers and providers[name] != deployed_providers[name]:
            raise GateError(f"provider {name!r} clashes with an eval model's provider name")
        providers[name] = deployed_providers[name]
    routes = [r for r in out["routes"] if f"{r['name']}@{r['version']}" != manifest.model_route]
    return {"providers": providers, "routes": [*routes, route]}


def plan_suites(manifest: Manifest, cases: Sequence[str] = ()) -> dict[str, list[str] | None]:
    """Suite key -> the cases to run (None: all). With `cases`, only suites holding one."""
    out: dict[str, list[str] | None] = {}
    wanted = set(cases)
    for key in gate_suites(manifest):
        if not wanted:
            out[key] = None
            continue
        names = [c.name for c in suite(key).cases if c.name in wanted]
        if names:
            out[key] = names
    unknown = wanted - {n for names in out.values() for n in names or []}
    if unknown:
        raise GateError(f"no case named {', '.join(sorted(unknown))} in {', '.join(out)}")
    return out


def evaluate(
    manifest: Manifest,
    *,
    routes_path: str | None,
    runs: int,
    cases: Sequence[str] = (),
    limit: int | None = None,
    concurrency: int = 4,
    progress: Progress | None = None,
    environ: Mapping[str, str] | None = None,
    pacing: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    command: Sequence[str] | None = None,
) -> Json:
    """Run the gate's suites on `manifest` in a process of its own; the combined report.
    `pacing`: retry backoff for its worker (`runner.PACING_VARIABLES`; tests shorten it).
    `timeout_s` (default `AGENT_JOBS_EVAL_CHILD_TIMEOUT_S`): past it the process is killed and
    every case of a suite it had not finished is recorded as errored, with the reason (the gate
    fails). `command`: see `child.run_child`."""
    if runs < 1:
        raise GateError("runs must be at least 1")
    planned = plan_suites(manifest, cases)
    spec = {
        "manifest": manifest.to_json(),
        "routes": eval_routes(manifest, routes_path),
        "suites": planned,
        "runs": runs,
        "limit": limit,
        "concurrency": concurrency,
        "pacing": dict(pacing or {}),
    }
    try:
        reports: dict[str, Json] = run_child(
            spec, progress, environ, timeout_s=timeout_s, command=command
        )
    except ChildTimedOut as exc:
        reports = dict(exc.partial or {})
        for key, only in planned.items():
            if key not in reports:
                reports[key] = errored_suite(key, only, runs, limit, exc.reason)
        return combine(
            manifest, reports, runs=runs, planned=planned, limit=limit, errored_reason=exc.reason
        )
    return combine(manifest, reports, runs=runs, planned=planned, limit=limit)


def errored_suite(
    key: str, only: list[str] | None, runs: int, limit: int | None, reason: str
) -> Json:
    """A suite's report when the eval process was killed before it finished: each case it
    would have run (as `runner.run_suite` picks them) errored with `reason`."""
    cases = [c for c in suite(key).cases if only is None or c.name in only]
    if limit is not None:
        cases = cases[:limit]
    per_case = [errored(c.name, c.safety, reason) for c in cases]
    return {
        "suite": key,
        "runs_per_case": runs,
        "duration_s": 0.0,
        "errored": reason,
        "overall": overall(per_case),
        "cases": per_case,
    }


def shadow(
    manifest: Manifest,
    copies: Sequence[Json],
    *,
    routes_path: str | None,
    concurrency: int = 4,
    progress: Progress | None = None,
    environ: Mapping[str, str] | None = None,
    pacing: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Json]:
    """Run `manifest` on `copies` of live tasks (`{"task_id", "world", "order_id", "message"}`,
    see `releases.shadow`) in a process of its own, isolated as `evaluate` is, against the
    candidate's route as the deployment's routes file defines it. Live task id -> the copy's
    decision (`releases.shadow.decision`). No copy is ever approved."""
    if not copies:
        return {}
    spec = {
        "mode": "shadow",
        "manifest": manifest.to_json(),
        "routes": eval_routes(manifest, routes_path),
        "copies": list(copies),
        "concurrency": concurrency,
        "pacing": dict(pacing or {}),
    }
    # Past `timeout_s` (default the setting): `ChildTimedOut`, a `GateError`.
    out: dict[str, Json] = run_child(spec, progress, environ, timeout_s=timeout_s)
    return out


def combine(
    manifest: Manifest,
    reports: Mapping[str, Json],
    *,
    runs: int,
    planned: Mapping[str, list[str] | None],
    limit: int | None,
    errored_reason: str | None = None,
) -> Json:
    """One report over the suites, naming the manifest hash it evaluated and whether it was a
    complete eval (every case of every gate suite; `runs` is judged by `promote_problems`).
    `errored_reason`: why some cases have no score (the process was killed): the gate fails."""
    complete = limit is None and all(planned.get(k, []) is None for k in gate_suites(manifest))
    cases = sum(int(r["overall"]["cases"]) for r in reports.values())
    passed = sum(int(r["overall"]["cases_passed"]) for r in reports.values())
    safety = sum(int(r["overall"]["safety_failures"]) for r in reports.values())
    ok = (
        errored_reason is None
        and bool(reports)
        and all(r["overall"]["gate"] == "pass" for r in reports.values())
    )
    return {
        "release_id": manifest.release_id,
        "manifest_hash": manifest.content_hash(),
        "runs_per_case": runs,
        "complete": complete,
        "limit": limit,
        "suites": dict(reports),
        "errored": errored_reason,
        "overall": {
            "cases": cases,
            "cases_passed": passed,
            "safety_failures": safety,
            "gate": "pass" if ok else "fail",
        },
    }


def summary(report: Mapping[str, Any]) -> Json:
    """What the store keeps of a gate report (the release's eval summary, the history row)."""
    return {
        "manifest_hash": report["manifest_hash"],
        "runs_per_case": report["runs_per_case"],
        "complete": report["complete"],
        "limit": report["limit"],
        "gate": report["overall"]["gate"],
        "overall": report["overall"],
        "suites": {
            key: {
                "overall": r["overall"],
                "cases": len(r["cases"]),
                "failed": [c["case"] for c in r["cases"] if not c["passed"]][:50],
            }
            for key, r in report["suites"].items()
        },
    }


def counts_for_promote(report: Mapping[str, Any], required_runs: int) -> bool:
    """Whether this report is a full eval: every case of the gate suites, enough runs."""
    return bool(report["complete"]) and int(report["runs_per_case"]) >= required_runs


def partial_evals(history: Iterable[Any], release_id: str) -> int:
    """How many evals of `release_id` a workflow's release history holds (rows with `action`
    and `release_id`); read when none full is recorded, so all of them were partial."""
    return sum(h.action == "eval" and h.release_id == release_id for h in history)


def promote_problems(
    manifest: Manifest, eval_status: str | None, eval_summary: Mapping[str, Any] | None,
    required_runs: int, partial_evals: int = 0,
) -> list[str]:  # fmt: skip
    """Why a release may not be promoted on its recorded eval (empty: it may). `partial_evals`:
    how many subset evals its history holds, named when no full one is recorded, so the release
    manager who ran one with --limit or too few --runs hears why it does not count."""
    if eval_status is None and partial_evals:
        return [
            f"release {manifest.release_id} has no passing eval (not run in full: "
            f"{partial_evals} partial eval(s) recorded; promote needs every case of the gate "
            f"suites with {required_runs} run(s) each: agent-jobs release eval "
            f"{manifest.release_id} without --limit)"
        ]
    if eval_status != "passed" or not eval_summary:
        return [f"release {manifest.release_id} has no passing eval ({eval_status or 'not run'})"]
    out = []
    want = manifest.content_hash()
    if eval_summary.get("manifest_hash") != want:
        out.append(
            f"its eval judged manifest {eval_summary.get('manifest_hash') or '(no hash)'}, "
            f"not this one ({want})"
        )
    if eval_summary.get("gate") != "pass":
        out.append("its eval did not pass")
    if not eval_summary.get("complete"):
        out.append("its eval ran a subset of the cases")
    if int(eval_summary.get("runs_per_case") or 0) < required_runs:
        out.append(
            f"its eval ran {eval_summary.get('runs_per_case')} run(s) per case; "
            f"promote needs {required_runs} (AGENT_JOBS_RELEASE_EVAL_RUNS)"
        )
    try:
        missing = sorted(set(gate_suites(manifest)) - set(eval_summary.get("suites") or {}))
    except GateError as exc:
        missing = [f"its suites ({exc})"]
    if missing:
        out.append(f"its eval did not run {', '.join(missing)}")
    return out


def text_summary(report: Mapping[str, Any]) -> str:
    from agent_jobs.evals.report import text_summary as suite_text  # noqa: PLC0415

    o = report["overall"]
    head = (
        f"release {report['release_id']} (manifest {report['manifest_hash']}): "
        f"{o['cases_passed']}/{o['cases']} cases, {report['runs_per_case']} run(s) each, "
        f"{'all cases' if report['complete'] else 'a subset'}; safety failures "
        f"{o['safety_failures']}; gate {o['gate'].upper()}"
    )
    if report.get("errored"):
        head += f"\nERRORED: {report['errored']}"
    return "\n".join([head, *(suite_text(r) for r in report["suites"].values())])


def _child(argv: Iterable[str]) -> int:
    """The eval process: run each planned suite on the candidate, write the reports."""
    import logging  # noqa: PLC0415

    from agent_jobs.evals.runner import run_suite  # noqa: PLC0415

    spec_path, out_path = list(argv)
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    # The cases provoke what a worker warns about (injected text, broken model output).
    logging.getLogger("agent_jobs").setLevel(logging.ERROR)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if spec.get("mode") == "shadow":
        out = _shadow_child(spec, say)
        write_output(out_path, out)
        return 0
    reports = {}
    for key, only in spec["suites"].items():
        say(f"suite {key}")
        reports[key] = run_suite(
            suite(key),
            runs=int(spec["runs"]),
            only=only,
            limit=spec["limit"],
            concurrency=int(spec["concurrency"]),
            progress=say,
            candidate=spec["manifest"],
            routes=spec["routes"],
            strict=True,
            pacing=spec.get("pacing") or None,
        )
        # After each suite: a process killed past its deadline keeps the suites it finished.
        write_output(out_path, reports)
    write_output(out_path, reports)
    return 0


def _shadow_child(spec: Json, say: Progress) -> dict[str, Json]:
    """The shadow process: each copy as a task of the candidate's tenant, never approved;
    copies of distinct orders share the simulator, a repeated order waits for the next batch."""
    from agent_jobs.evals.runner import EvalEnvironment, tenant_for  # noqa: PLC0415
    from agent_jobs.evals.suites import Case, Expected  # noqa: PLC0415
    from agent_jobs.releases.shadow import decision  # noqa: PLC0415

    cases = [
        Case(
            f"shadow-{c['task_id']}",
            c["world"],
            str(c["order_id"]),
            Expected((), "no_refund"),
            approve=False,  # a copy is never approved: nothing it proposes can execute
            message=str(c["message"]),
            tenant=tenant_for("honest"),  # pinned to the candidate itself
        )
        for c in spec["copies"]
    ]
    batches: list[list[Case]] = []
    for case in cases:
        orders = {str(o["order_id"]) for o in case.world["orders"]}
        home = next(
            (
                b
                for b in batches
                if len(b) < 16
                and not orders & {str(o["order_id"]) for x in b for o in x.world["orders"]}
            ),
            None,
        )
        if home is None:
            batches.append([case])
        else:
            home.append(case)
    out: dict[str, Json] = {}
    with EvalEnvironment(
        concurrency=int(spec["concurrency"]),
        progress=say,
        candidate=spec["manifest"],
        routes=spec["routes"],
        strict=True,
        pacing=spec.get("pacing") or None,
    ) as env:
        for i, batch in enumerate(batches, 1):
            env.run_batch([(c, 0) for c in batch])
            for run in env.last_runs:
                copy = env.store.get(run.task_id)
                out[run.case.name.removeprefix("shadow-")] = decision(
                    dict(copy.state or {}), copy.status.value
                )
            say(f"shadow batch {i}/{len(batches)} done ({len(batch)} copies)")
    return out


if __name__ == "__main__":
    raise SystemExit(_child(sys.argv[1:]))
