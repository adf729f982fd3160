"""The `agent-jobs bench` command tree: each benchmark and what its options mean (the commands
that run them are in `cli/bench.py`)."""

from __future__ import annotations

from typing import Any

from agent_jobs.cli import bench, bench_beside, bench_failover, bench_pgbouncer, bench_webhooks
from agent_jobs.cli.args import BENCH_JSON, add_json, add_workers

ABBA = "rounds, alternating which side runs first (ABBA); medians are reported"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="benchmarks on Postgres + Redis (print figures; --json for one object)"
    )
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCH")
    bsub.required = True

    t = bsub.add_parser(
        "transitions", help="transitions/s of a no-op workflow vs a hand-built Celery floor"
    )
    _tasks_and_steps(t, tasks=20, steps=200, also="the floor runs as many Celery chains")
    add_workers(t, 2)
    t.add_argument("--rounds", type=int, default=6, help=f"{ABBA} (default %(default)s)")
    add_json(t, BENCH_JSON)
    t.set_defaults(func=bench.guarded(bench.cmd_transitions))

    pe = bsub.add_parser(
        "peers", help="steps/s and CPU/step beside a plain Celery chain and DBOS; hand-off p50/p99"
    )
    _tasks_and_steps(pe, tasks=20, steps=200, also="the peers run as many chains and workflows")
    add_workers(pe, 2, "worker processes (and DBOS processes)")
    pe.add_argument("--rounds", type=int, default=4, help="rounds, rotating which side runs first")
    pe.add_argument("--handoff-steps", type=int, default=200, help="steps of the lone task")
    pe.add_argument("--no-dbos", action="store_true", help="skip DBOS (the `peers` extra)")
    _side_by_side_options(pe, pairs=3)
    add_json(pe, BENCH_JSON)
    pe.set_defaults(func=bench.guarded(bench.cmd_peers))
    bench_webhooks.register(bsub, bench.guarded)

    f = bsub.add_parser("fairness", help="a lone tenant's wait behind another tenant's backlog")
    f.add_argument("--tenants", type=int, default=20, help="tenants with queues")
    f.add_argument(
        "--backlog",
        type=int,
        default=2000,
        help="steps tenant A queues before tenant B submits its one task, in whole tasks of 4 "
        "steps (default %(default)s; not with --active)",
    )
    f.add_argument(
        "--step-ms",
        type=float,
        default=5.0,
        help="milliseconds each backlog step sleeps (default %(default)s; not with --active)",
    )
    add_workers(f, 2)
    f.add_argument(
        "--rounds", type=int, default=None, help="rounds (default 5; with --active 4, ABBA)"
    )
    f.add_argument(
        "--active",
        type=int,
        default=None,
        help="scale mode: of --tenants known tenants, this many have work",
    )
    f.add_argument(
        "--compare-all",
        action="store_true",
        help="scale mode: also run with every known tenant consumed (idle dropping off)",
    )
    f.add_argument("--no-shared", action="store_true", help="skip the one-shared-queue baseline")
    bench_beside.add_options(f, pairs=1)  # scale mode: beside the code before a change
    add_json(f, BENCH_JSON)
    f.set_defaults(func=bench.guarded(bench.cmd_fairness))

    c = bsub.add_parser(
        "chaos", help="SIGKILL workers and flush the broker under load; count losses"
    )
    c.add_argument(
        "--tasks",
        type=int,
        default=300,
        help="example payouts submitted over 10 tenants, about one in four needing an approval "
        "(default %(default)s)",
    )
    add_workers(c, 3, "worker processes kept running, a new one replacing each killed")
    c.add_argument("--kill-every", type=float, default=4.0, help="seconds between SIGKILLs")
    c.add_argument(
        "--flushes",
        type=int,
        default=2,
        help="times the bench's own broker is flushed (FLUSHDB), one every second kill "
        "interval (default %(default)s)",
    )
    c.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds to wait for every task to end; one not ended then is counted lost "
        "(default %(default)s)",
    )
    c.add_argument(
        "--seed",
        type=int,
        default=8472,
        help="seeds the payouts' amounts and reads and which worker each kill hits "
        "(default %(default)s)",
    )
    add_json(c, BENCH_JSON)
    c.set_defaults(func=bench.guarded(bench.cmd_chaos))

    _register_issue5(bsub)
    _register_platform(bsub)
    _register_sweep(bsub)
    _register_history(bsub)
    _register_recovery(bsub)
    _register_outage(bsub)
    _register_guardrails(bsub)
    _add_wipe(bsub)  # last: every benchmark registered above gets `--wipe`


def _tasks_and_steps(p: Any, *, tasks: int, steps: int, also: str) -> None:
    """`--tasks` and `--steps` of the no-op workload a round runs (each task a tenant's own)."""
    p.add_argument(
        "--tasks",
        type=int,
        default=tasks,
        help=f"no-op tasks a round, each on a tenant of its own; {also} (default %(default)s)",
    )
    p.add_argument(
        "--steps", type=int, default=steps, help="steps of each no-op task (default %(default)s)"
    )


def _side_by_side_options(p: Any, *, pairs: int) -> None:
    """`--baseline DIR --pairs N`, the same on every benchmark that compares two checkouts."""
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="side by side with the checkout in DIR (e.g. a git worktree of the commit before "
        "a change): alternating runs of both, medians and each pair's ratio",
    )
    p.add_argument("--pairs", type=int, default=pairs, help="with --baseline: pairs of runs")


def _register_sweep(bsub: Any) -> None:
    s = bsub.add_parser("sweep", help="sweep cost with many finished tasks vs few")
    s.add_argument(
        "--rows",
        type=int,
        default=1_000_000,
        help="finished tasks seeded for the large side (default %(default)s)",
    )
    s.add_argument(
        "--small",
        type=int,
        default=1_000,
        help="finished tasks on the small side, measured first (default %(default)s)",
    )
    s.add_argument(
        "--due",
        type=int,
        default=100,
        help="tasks due at each sweep, split evenly over the lease, dispatch, retry, unknown "
        "and approvals sweepers (default %(default)s)",
    )
    s.add_argument(
        "--repeats",
        type=int,
        default=7,
        help="sweeps measured on each side, the median printed (default %(default)s)",
    )
    add_json(s, BENCH_JSON)
    s.set_defaults(func=bench.guarded(bench.cmd_sweep))


def _add_wipe(bsub: Any) -> None:
    """`--wipe DATABASE` on every benchmark: the only way it empties a database it did not
    create and mark (see `store.admin`)."""
    for parser in bsub.choices.values():
        parser.add_argument(
            "--wipe",
            action="append",
            default=[],
            metavar="DATABASE",
            help="empty DATABASE although this benchmark did not create it (it must be the "
            "database AGENT_JOBS_DATABASE_URL names, or one derived from it); repeatable. "
            "Without it a benchmark runs only on a database it created and marked",
        )


def _register_issue5(bsub: Any) -> None:
    n = bsub.add_parser("noisy", help="others' p99 step wait while one tenant bursts 10x its share")
    n.add_argument("--steps", type=int, default=150, help="steps per task")
    n.add_argument(
        "--burst", type=int, default=10, help="the noisy tenant's tasks during the burst"
    )
    n.add_argument("--steady", type=int, default=19, help="tenants running steadily beside it")
    add_workers(n, 2)
    n.add_argument(
        "--rounds", type=int, default=4, help="rounds, alternating which side runs first (ABBA)"
    )
    add_json(n, BENCH_JSON)
    n.set_defaults(func=bench.guarded(bench.cmd_noisy))

    cf = bsub.add_parser(
        "cost-fairness", help="shares of cost between 1x and 10x tenants; Jain's index"
    )
    cf.add_argument(
        "--tenants",
        type=int,
        default=6,
        help="tenants, half of them cheap and the rest costly (default %(default)s)",
    )
    cf.add_argument("--cheap-ms", type=float, default=10.0, help="the cheap tenants' step cost")
    cf.add_argument(
        "--ratio", type=float, default=10.0, help="the costly tenants' cost, in cheap steps"
    )
    cf.add_argument("--window", type=float, default=20.0, help="seconds measured")
    add_workers(cf, 2)
    cf.add_argument("--no-compare", action="store_true", help="skip the fair-share-off run")
    add_json(cf, BENCH_JSON)
    cf.set_defaults(func=bench.guarded(bench.cmd_cost_fairness))


def _register_platform(bsub: Any) -> None:
    pl = bsub.add_parser(
        "platform", help="the platform's own time in one refund task (seed budget: 80 ms)"
    )
    pl.add_argument("--tasks", type=int, default=10, help="refund tasks measured")
    add_workers(pl, 2)
    pl.add_argument("--concurrent", action="store_true", help="submit all at once")
    pl.add_argument("--warmup", type=int, default=1, help="unmeasured tasks run first")
    _side_by_side_options(pl, pairs=6)
    add_json(pl, BENCH_JSON)
    pl.set_defaults(func=bench.guarded(bench.cmd_platform))


def _register_history(bsub: Any) -> None:
    h = bsub.add_parser(
        "history", help="transitions/s with 10M rows of finished history vs an empty database"
    )
    h.add_argument("--rows", type=int, default=10_000_000, help="history rows: tasks + events")
    h.add_argument("--events-per-task", type=int, default=9, help="events per finished task")
    _tasks_and_steps(h, tasks=20, steps=200, also="the same on both databases")
    add_workers(h, 2, "worker processes per database")
    h.add_argument(
        "--rounds", type=int, default=4, help="rounds, alternating which side runs first (ABBA)"
    )
    h.add_argument("--reseed", action="store_true", help="seed the history database again")
    add_json(h, BENCH_JSON)
    h.set_defaults(func=bench.guarded(bench.cmd_history))


def _register_recovery(bsub: Any) -> None:
    rc = bsub.add_parser(
        "recovery", help="recovery after a SIGKILL mid-step: step acks in memory vs in the broker"
    )
    rc.add_argument("--tasks", type=int, default=20, help="no-op tasks kept running")
    rc.add_argument("--kills", type=int, default=5, help="SIGKILLs per mode per round")
    rc.add_argument(
        "--rounds", type=int, default=2, help="rounds, alternating which mode runs first (ABBA)"
    )
    add_json(rc, BENCH_JSON)
    rc.set_defaults(func=bench.guarded(bench.cmd_recovery))


def _register_outage(bsub: Any) -> None:
    o = bsub.add_parser(
        "outage",
        help="Postgres stopped and back, Redis killed and restarted empty: how soon work moves",
        description="Stops a Postgres the bench owns (a TCP proxy it cuts in front of the "
        "server) and its own redis-server (SIGKILL, restarted empty) under load, with the "
        "default timings; prints how soon every runnable task moves again after the service "
        "answers (median, max), tasks lost and effects applied twice.",
    )
    o.add_argument(
        "--tasks", type=int, default=20, help="no-op tasks running (plus half as many payouts)"
    )
    o.add_argument("--down", type=float, default=10.0, help="seconds each service is away")
    o.add_argument("--scenarios", default="postgres,redis", help="comma-separated: postgres, redis")
    add_json(o, BENCH_JSON)
    o.set_defaults(func=bench.guarded(bench.cmd_outage))
    bench_failover.register(bsub, bench.guarded)
    bench_pgbouncer.register(bsub, bench.guarded)


def _register_guardrails(bsub: Any) -> None:
    g = bsub.add_parser(
        "guardrails",
        help="a canary whose model degrades: how soon beat's guardrails revert it, its exposure",
    )
    g.add_argument(
        "--interval", type=float, default=10.0, help="AGENT_JOBS_GUARDRAILS_INTERVAL_S for the run"
    )
    g.add_argument("--timeout", type=float, default=120.0, help="give up after this long")
    add_json(g, BENCH_JSON)
    g.set_defaults(func=bench.guarded(bench.cmd_guardrails))
