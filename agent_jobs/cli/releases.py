"""`agent-jobs release create|show|list|eval|promote|rollback|canary|shadow|guardrails|phase`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent_jobs.cli.args import add_actor, add_limit, add_reason, add_task_id

ACTOR = "cli"
HISTORY = "the release history that `release list` shows"
WORKFLOW = "refund_resolution@3"
# The phase ladder as `releases.rollout.PHASE_NAMES` has it (named here so that `--help` loads no
# store; tests/unit/test_cli_help.py fails when the two differ).
PHASES = ("shadow", "read_only_assistant", "bounded_tools", "approved_refunds", "bounded_autonomy")


def _service() -> Any:
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
    from agent_jobs.releases.rollout import ReleaseService  # noqa: PLC0415

    return ReleaseService(get_runtime().store)


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _release_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("release_id", help="the release's id, as `release create` printed it")


def _workflow(p: argparse.ArgumentParser, whose: str) -> None:
    p.add_argument(
        "--workflow", default=WORKFLOW, help=f"the workflow {whose} (default %(default)s)"
    )


def register(sub: Any) -> None:  # noqa: PLR0915 - one parser per subcommand
    p = sub.add_parser("release", help="release manifests: create, evaluate, roll out, roll back")
    rs = p.add_subparsers(dest="release_command", metavar="RELEASE")
    rs.required = True

    c = rs.add_parser("create", help="store a manifest (JSON file); every named version must exist")
    c.add_argument("manifest", help="the manifest's JSON file")
    add_actor(c, HISTORY, ACTOR)
    c.set_defaults(func=cmd_create)

    s = rs.add_parser("show", help="a release's manifest and eval result")
    _release_id(s)
    s.set_defaults(func=cmd_show)

    ls = rs.add_parser("list", help="releases, the live rollout and recent history")
    _workflow(ls, "whose releases")
    ls.set_defaults(func=cmd_list)

    e = rs.add_parser(
        "eval",
        help="the gate: run the golden and safety suites on this release's manifest (its route, "
        "prompt, policy, flags, tools) in an isolated process; records the result",
    )
    _release_id(e)
    e.add_argument(
        "--runs",
        type=int,
        default=None,
        help="runs per case (default AGENT_JOBS_RELEASE_EVAL_RUNS; fewer unlocks no promote)",
    )
    e.add_argument(
        "--limit", type=int, default=None, help="only the first N cases of each suite (a subset)"
    )
    e.add_argument(
        "--case", action="append", default=[], help="only this case (repeatable; a subset)"
    )
    e.add_argument("--concurrency", type=int, default=4, help="worker threads")
    e.add_argument("--json", dest="json_out", default=None, help="write the JSON report here")
    e.add_argument("--quiet", action="store_true", help="no progress lines")
    e.set_defaults(func=cmd_eval)

    pr = rs.add_parser(
        "promote",
        help="make the release the incumbent (needs a passed full eval of this exact manifest)",
    )
    _release_id(pr)
    add_reason(pr, HISTORY)
    pr.add_argument(
        "--force", action="store_true", help="promote without a passing eval (recorded as forced)"
    )
    add_actor(pr, HISTORY, ACTOR)
    pr.set_defaults(func=cmd_promote)

    rb = rs.add_parser(
        "rollback", help="back to the previous incumbent; in-flight tasks keep theirs"
    )
    _workflow(rb, "whose incumbent goes back")
    add_reason(rb, HISTORY)
    add_actor(rb, HISTORY, ACTOR)
    rb.set_defaults(func=cmd_rollback)

    ca = rs.add_parser("canary", help="route PERCENT of tenants (stable by tenant) to the release")
    _release_id(ca)
    ca.add_argument(
        "--percent",
        type=int,
        required=True,
        help="0-100: the share of tenants routed to it, each tenant always on the same side",
    )
    add_reason(ca, HISTORY, default="canary")
    add_actor(ca, HISTORY, ACTOR)
    ca.set_defaults(func=cmd_canary)

    sh = rs.add_parser(
        "shadow",
        help="run the release on copies of recent live tasks, in an isolated process against "
        "the deployment's routes; how often its decisions agree with the live ones",
    )
    _release_id(sh)
    sh.add_argument(
        "--window-s",
        type=float,
        default=3600.0,
        help="copy live tasks created in the last this many seconds (default %(default)s)",
    )
    add_limit(sh, 50, "live tasks copied, newest first")
    sh.add_argument("--quiet", action="store_true", help="no progress lines")
    sh.set_defaults(func=cmd_shadow)

    rp = rs.add_parser(
        "replay",
        help="replay a task a (reverted) release escalated, once, as a new task on the "
        "incumbent; a second replay of the same task is refused",
    )
    add_task_id(rp, "the escalated task's id (as `incidents tasks --release` lists it)")
    add_reason(rp, HISTORY)
    add_actor(rp, HISTORY, ACTOR)
    rp.set_defaults(func=cmd_replay)

    g = rs.add_parser(
        "guardrails",
        help="check the canary's window now; revert it on a breach (beat also runs this every "
        "AGENT_JOBS_GUARDRAILS_INTERVAL_S)",
    )
    _workflow(g, "whose canary")
    g.add_argument(
        "--window-s",
        type=float,
        default=3600.0,
        help="compare the tasks created in the last this many seconds (default %(default)s)",
    )
    g.set_defaults(func=cmd_guardrails)

    ph = rs.add_parser(
        "phase", help="move a tenant along the phase ladder with the gate's evidence"
    )
    ph.add_argument("tenant", help="the tenant's id")
    ph.add_argument(
        "phase",
        help=f"one of {', '.join(PHASES)}: forward one step at a time, with --evidence "
        "meeting its gate; back to any earlier one at any time",
    )
    ph.add_argument("--evidence", default="{}", help="JSON object")
    _workflow(ph, "whose ladder")
    add_actor(ph, HISTORY, ACTOR)
    ph.set_defaults(func=cmd_phase)


def cmd_create(args: argparse.Namespace) -> int:
    data = json.loads(Path(args.manifest).read_text(encoding="utf-8"))
    row, created = _service().create(data, args.actor)
    print(f"{'created' if created else 'exists'} {row.release_id} ({row.workflow})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    row = _service().store.get_release(args.release_id)
    _print({**row.__dict__})
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    svc = _service()
    ro = svc.store.rollout(args.workflow)
    print(f"live: {ro.__dict__ if ro else 'none (built-in pins)'}")
    for r in svc.store.list_releases(args.workflow):
        print(
            f"  {r.release_id:<32} eval={r.eval_status or '-':<7} "
            f"by {r.created_by} at {r.created_at}"
        )
    print("history:")
    for h in svc.store.release_history(args.workflow, limit=20):
        print(f"  {h.at} {h.action:<14} {h.release_id or '-':<28} {h.actor}: {h.reason}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agent_jobs.config import load_settings  # noqa: PLC0415
    from agent_jobs.evals import gate  # noqa: PLC0415

    svc = _service()
    runs = svc.eval_runs if args.runs is None else args.runs
    if runs < 1 or (args.limit is not None and args.limit < 1):
        print("agent-jobs: error: --runs and --limit must be at least 1", file=sys.stderr)
        return 2
    manifest = svc.catalog.check(svc.manifest(args.release_id))
    say = None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    report = gate.evaluate(
        manifest,
        routes_path=load_settings().model_routes,
        runs=runs,
        cases=args.case,
        limit=args.limit,
        concurrency=args.concurrency,
        progress=say,
    )
    unlocks = svc.record_eval(report, ACTOR)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(gate.text_summary(report))
    if report["overall"]["gate"] == "pass" and not unlocks:
        print(
            f"recorded as a partial eval: promote needs every case of "
            f"{', '.join(gate.gate_suites(manifest))} with {svc.eval_runs} run(s) each"
        )
    return 0 if report["overall"]["gate"] == "pass" else 1


def cmd_promote(args: argparse.Namespace) -> int:
    ro = _service().promote(args.release_id, args.actor, args.reason, force=args.force)
    print(f"{ro.workflow}: incumbent {ro.incumbent}")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    ro = _service().rollback(args.workflow, args.actor, args.reason)
    print(f"{ro.workflow}: incumbent {ro.incumbent or 'none (built-in pins)'}")
    return 0


def cmd_canary(args: argparse.Namespace) -> int:
    if not 0 <= args.percent <= 100:
        print("agent-jobs: error: --percent must be 0..100", file=sys.stderr)
        return 2
    ro = _service().start(args.release_id, "canary", args.percent, args.actor, args.reason)
    print(f"{ro.workflow}: canary {ro.candidate} at {ro.traffic_percent}% of tenants")
    return 0


def cmd_shadow(args: argparse.Namespace) -> int:
    from agent_jobs.config import load_settings  # noqa: PLC0415
    from agent_jobs.releases.shadow import shadow_report  # noqa: PLC0415

    svc = _service()
    manifest = svc.manifest(args.release_id)
    say = None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    _print(
        shadow_report(
            svc.store,
            manifest.to_json(),
            routes_path=load_settings().model_routes,
            workflow=manifest.workflow,
            window_s=args.window_s,
            limit=args.limit,
            progress=say,
        )
    )
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415

    svc = _service()
    task, created = svc.replay_on_incumbent(
        get_runtime().orchestrator, args.task_id, args.actor, args.reason
    )
    if not created:
        print(
            f"agent-jobs: error: {args.task_id} was already replayed, as {task.id}",
            file=sys.stderr,
        )
        return 1
    print(f"{args.task_id} replayed as {task.id} on {task.pinned.get('release')}")
    return 0


def cmd_guardrails(args: argparse.Namespace) -> int:
    from agent_jobs.releases.rollout import Guardrails  # noqa: PLC0415

    result = _service().check_guardrails(args.workflow, Guardrails(window_s=args.window_s))
    _print(result)
    return 1 if result["reverted"] else 0


def cmd_phase(args: argparse.Namespace) -> int:
    _service().set_phase(
        args.tenant, args.workflow, args.phase, json.loads(args.evidence), args.actor
    )
    print(f"{args.tenant}: {args.phase}")
    return 0
