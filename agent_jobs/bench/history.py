"""`agent-jobs bench history`: transitions/s of the hot path on a database holding `rows` rows of
history — finished tasks and their events, as production keeps them until the archive sweeper
prunes them past the retention — against the same on an empty database.

Two deployments run side by side, each with its own database, queue prefix and worker processes
(the idle one's workers sit in a blocking BRPOP), and their rounds alternate (ABBA). The history
database is seeded once (minutes for 10M rows) and kept for the next run while it still holds
the requested rows; `reseed=True` seeds it again. The history is spread over the tenants the
bench runs on (`bench0..bench49`), so any per-tenant query that reaches finished rows shows.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

from agent_jobs.bench.common import Phase, abba, median, require_services
from agent_jobs.bench.common import progress as say
from agent_jobs.bench.procs import cpu_seconds, workers_cpu
from agent_jobs.config import load_settings
from agent_jobs.store.store import Store

TARGET_RATIO = 0.9
EMPTY_SUFFIX = "hist_empty"
HISTORY_SUFFIX = "hist_full"


def run(
    *,
    rows: int,
    events_per_task: int,
    tasks: int,
    steps: int,
    workers: int,
    rounds: int,
    reseed: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    # Its own two databases (derived from the configured name) are claimed below; the configured
    # one is never written.
    require_services(claim=False)
    if events_per_task < 1:
        raise ValueError("events_per_task: every task has at least its 'created' event")
    show = progress
    base_url = load_settings().database_url
    empty_url = sibling_database(base_url, EMPTY_SUFFIX)
    history_url = sibling_database(base_url, HISTORY_SUFFIX)
    want_tasks = max(1, rows // (1 + events_per_task))
    have, seeded_s = _history_database(history_url, want_tasks, events_per_task, reseed, show)
    tenants = [f"bench{i}" for i in range(tasks)]
    rates: dict[str, list[float]] = {"empty": [], "history": []}
    # CPU milliseconds per transition: (workers, database backends)
    cpu: dict[str, list[tuple[float, float]]] = {"empty": [], "history": []}
    with ExitStack() as stack:
        empty = stack.enter_context(
            Phase("empty", workers, show, {"AGENT_JOBS_DATABASE_URL": empty_url})
        )
        full = stack.enter_context(
            # `_history_database` has migrated the seeded database and removed earlier runs'
            # tasks: the phase keeps it instead of emptying it.
            Phase("history", workers, show, {"AGENT_JOBS_DATABASE_URL": history_url}, fresh=False)
        )
        phases = {"empty": empty, "history": full}
        for name, ph in phases.items():
            # The workers learn the tenant queues and prepare their statements.
            say(show, f"[{name}] warm-up")
            _round(ph, tenants, 5)
        for r in range(rounds):
            for name in abba(r, ["empty", "history"]):
                n, secs, workers_s, db_s = _round(phases[name], tenants, steps)
                rates[name].append(n / secs)
                cpu[name].append((workers_s * 1000 / n, db_s * 1000 / n))
                say(show, f"round {r + 1}/{rounds}: {name:<7} {n} transitions in {secs:.2f} s "
                          f"= {n / secs:.0f}/s; CPU per transition: workers {cpu[name][-1][0]:.2f} "
                          f"ms, database {cpu[name][-1][1]:.2f} ms")  # fmt: skip
    empty_rate, history_rate = median(rates["empty"]), median(rates["history"])
    ratio = history_rate / empty_rate
    return {
        "empty_per_s": round(empty_rate, 1),
        "history_per_s": round(history_rate, 1),
        "ratio": round(ratio, 3),
        "target": TARGET_RATIO,
        "ok": ratio >= TARGET_RATIO,
        "history_rows": have,
        "rows": rows,
        "events_per_task": events_per_task,
        "seeded": seeded_s is not None,
        "seed_s": None if seeded_s is None else round(seeded_s, 1),
        "tasks": tasks,
        "steps": steps,
        "workers": workers,
        "rounds": rounds,
        "cpu_ms_per_transition": {
            k: {
                "workers": round(median([w for w, _ in v]), 3),
                "database": round(median([d for _, d in v]), 3),
            }
            for k, v in cpu.items()
        },
        "samples": {k: [round(x, 1) for x in v] for k, v in rates.items()},
    }


def sibling_database(url: str, suffix: str) -> str:
    """`postgresql://h/agent_jobs_bench?x` -> `postgresql://h/agent_jobs_bench_<suffix>?x`: the
    names start with the configured database's, so a test's `aj_test_*` stays `aj_test_*`."""
    base, sep, query = url.partition("?")
    return f"{base}_{suffix}{sep}{query}"


def _history_database(
    url: str, want_tasks: int, events_per_task: int, reseed: bool, show: bool
) -> tuple[dict[str, Any], float | None]:
    """Make `url` hold exactly the requested history and nothing else: reuse it when it does
    (after removing the tasks an earlier run added), else empty and seed it. The rows present,
    and the seconds seeding took (None when reused)."""
    from agent_jobs.store.admin import claim_database, prepare  # noqa: PLC0415
    from agent_jobs.store.backend.postgres_seed import HISTORY_REQUESTER  # noqa: PLC0415
    from agent_jobs.store.benchdata import seed_history  # noqa: PLC0415
    from agent_jobs.store.migrate import upgrade  # noqa: PLC0415

    name = _name(url)
    want_events = want_tasks * events_per_task
    claim_database(url)  # created and marked now, or refused unless marked or --wipe
    store = Store.from_url(url)
    try:
        upgrade(store.engine)
        seeded_s: float | None = None
        have = None if reseed else _kept_history(store, HISTORY_REQUESTER)
        if have is not None and have["tasks"] == want_tasks and have["events"] == want_events:
            say(show, f"[history] reusing {name}: {have['tasks']:,} finished tasks and "
                      f"{have['events']:,} events already there (--reseed to seed again)")  # fmt: skip
        else:
            store.dispose()
            store = prepare(url)  # empties every table
            total = want_tasks + want_events
            say(show, f"[history] seeding {name}: {want_tasks:,} finished tasks x "
                      f"{events_per_task} events = {total:,} rows, indexes in place")  # fmt: skip
            start = time.monotonic()

            def batch(tasks_done: int, rows_done: int) -> None:
                rate = rows_done / max(1e-9, time.monotonic() - start)
                say(show, f"[history] seeded {rows_done:,}/{total:,} rows "
                          f"({tasks_done:,} tasks, {rate:,.0f} rows/s)")  # fmt: skip

            seed_history(store, want_tasks, events_per_task, on_batch=batch)
            _vacuum_analyze(store)
            seeded_s = time.monotonic() - start
            have = _counts(store)
            say(show, f"[history] seeded in {seeded_s:.0f} s")
        have["mb"] = _size_mb(store)
        return have, seeded_s
    finally:
        store.dispose()


def _kept_history(store: Store, requester: str) -> dict[str, Any]:
    """Remove what an earlier run's rounds added (every task that is not seeded history, with
    its events by cascade, and every other table's rows), then count what is left."""
    from agent_jobs.store.schema import metadata, task_events, tasks  # noqa: PLC0415

    others = [t.name for t in metadata.sorted_tables if t not in (tasks, task_events)]
    with store.engine.begin() as conn:
        gone = conn.exec_driver_sql(
            "DELETE FROM tasks WHERE requester <> %(r)s", {"r": requester}
        ).rowcount
        conn.exec_driver_sql(f"TRUNCATE {', '.join(others)}")
    if gone:
        _vacuum_analyze(store)  # the deleted rows' space and index entries, as autovacuum would
    return _counts(store)


def _counts(store: Store) -> dict[str, Any]:
    with store.engine.connect() as conn:
        n_tasks = int(conn.exec_driver_sql("SELECT count(*) FROM tasks").scalar_one())
        n_events = int(conn.exec_driver_sql("SELECT count(*) FROM task_events").scalar_one())
    return {"tasks": n_tasks, "events": n_events, "total": n_tasks + n_events}


def _size_mb(store: Store) -> float:
    sql = "SELECT pg_total_relation_size('tasks') + pg_total_relation_size('task_events')"
    with store.engine.connect() as conn:
        return round(int(conn.exec_driver_sql(sql).scalar_one()) / 2**20, 1)


def _vacuum_analyze(store: Store) -> None:
    """Statistics for the planner, and the visibility map and hint bits set now, so that the
    first round does not pay for writing them."""
    autocommit = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    with autocommit as conn, store.backend.lifted_timeouts(conn):  # long by design: no timeout
        conn.exec_driver_sql("VACUUM ANALYZE tasks, task_events")


def _name(url: str) -> str:
    return url.partition("?")[0].rsplit("/", 1)[1]


def _round(ph: Phase, tenants: list[str], steps: int) -> tuple[int, float, float, float]:
    """Every tenant runs one no-op task of `steps` steps: the transitions made, the seconds, and
    the CPU seconds the workers and the database's backends spent on them."""
    workers0, db0 = workers_cpu(ph.procs), _backends_cpu(ph)
    start = time.monotonic()
    ids = [ph.submit(t, {"steps": steps}) for t in tenants]
    ph.finish(ids)
    secs = time.monotonic() - start
    workers, db = workers_cpu(ph.procs) - workers0, _backends_cpu(ph) - db0
    # RECEIVED->RUNNING, `steps` observations, RUNNING->VERIFYING, VERIFYING->COMPLETED.
    return sum(ph.rt.store.get(i).version - 1 for i in ids), secs, workers, db


def _backends_cpu(ph: Phase) -> float:
    """CPU seconds used so far by the Postgres backends connected to this phase's database
    (read from /proc: 0.0 unless Postgres runs on this machine). Where the time of a slower
    side goes: the workers, or the database."""
    sql = (
        "SELECT pid FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    with ph.rt.store.engine.connect() as conn:
        pids = [int(p) for p in conn.exec_driver_sql(sql).scalars()]
    return sum(cpu_seconds(p) for p in pids)


def render(r: dict[str, Any]) -> str:
    verdict = "meets" if r["ok"] else "MISSES"
    h, c = r["history_rows"], r["cpu_ms_per_transition"]
    how = f"seeded in {r['seed_s']:.0f} s" if r["seeded"] else "reused"
    return "\n".join([
        f"bench history: {r['tasks']} tasks x {r['steps']} steps, {r['workers']} worker processes "
        f"per database, median of {r['rounds']} alternating rounds",
        f"  history: {h['tasks']:,} finished tasks + {h['events']:,} events = {h['total']:,} rows "
        f"({h['mb']:,.0f} MB, {how})",
        f"  empty database   {r['empty_per_s']:>8.1f} transitions/s   (samples {r['samples']['empty']})",
        f"  with history     {r['history_per_s']:>8.1f} transitions/s   (samples {r['samples']['history']})",
        f"  ratio            {r['ratio']:>8.3f}   target >= {r['target']} ({verdict})",
        f"  CPU per transition, workers / database: empty {c['empty']['workers']:.2f} / "
        f"{c['empty']['database']:.2f} ms, with history {c['history']['workers']:.2f} / "
        f"{c['history']['database']:.2f} ms",
    ])  # fmt: skip
