"""`agent-jobs bench chaos`: hundreds of example payouts through real worker processes and a
real beat, while workers are SIGKILLed and replaced, the broker's database is flushed, and the
ledger drops responses, times out and hangs. Counts lost tasks and duplicate effects: both must
be zero. Exit status 0 only then.

The bench destroys only what it created. Its broker is a redis-server of its own on a free port
(`procs.PrivateRedis`): the flushes, the queues, the tenant directory, the gate's buckets and the
switches channel of its workers, beat and runtime are all there, and the Redis named by
AGENT_JOBS_BROKER_URL / AGENT_JOBS_REDIS_URL is never written to. Postgres follows every bench's
guard (a database the bench created and marked, or one named with `--wipe`)."""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from agent_jobs.bench.common import bench_env, require_services
from agent_jobs.bench.common import progress as say
from agent_jobs.bench.procs import BeatProcess, PrivateRedis, WorkerProcess
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.states import TERMINAL, Status

CHAOS_ENV = {
    "AGENT_JOBS_LEASE_TTL_S": "3",
    "AGENT_JOBS_SWEEP_INTERVAL_S": "1",
    "AGENT_JOBS_DISPATCH_GRACE_S": "10",
    "AGENT_JOBS_RETRY_BASE_S": "0.2",
    "AGENT_JOBS_RETRY_MAX_S": "2",
    "AGENT_JOBS_MAX_ATTEMPTS": "8",
}
FLUSH_EVERY_KILLS = 2  # the broker is flushed every second kill interval (8 s, 16 s by default)


def run(
    *, tasks: int, workers: int, kill_every_s: float, flushes: int, timeout_s: float, seed: int,
    progress: bool = True,
) -> dict[str, Any]:  # fmt: skip
    require_services()
    tmp = Path(tempfile.mkdtemp(prefix="agent-jobs-chaos-"))
    with PrivateRedis(tmp) as own:
        return _run(
            own.url, tmp,
            tasks=tasks, workers=workers, kill_every_s=kill_every_s, flushes=flushes,
            timeout_s=timeout_s, seed=seed, progress=progress,
        )  # fmt: skip


def _run(  # noqa: PLR0915 - one scenario, read top to bottom
    broker_url: str, tmp: Path, *, tasks: int, workers: int, kill_every_s: float, flushes: int,
    timeout_s: float, seed: int, progress: bool,
) -> dict[str, Any]:  # fmt: skip
    rng = random.Random(seed)
    # Every Redis use of the workers, beat and this process's runtime (broker, tenant directory,
    # gate, switches listener) on the bench's own server: AGENT_JOBS_REDIS_URL, were it set,
    # would send the directory elsewhere, so it goes (the directory then lives in the broker's).
    # Set before anything reads this process's settings or Celery app.
    os.environ.pop("AGENT_JOBS_REDIS_URL", None)
    env = bench_env({
        **CHAOS_ENV,
        "AGENT_JOBS_BROKER_URL": broker_url,
        "AGENT_JOBS_EXAMPLE_BACKEND": str(tmp / "ledger.db"),
    })  # fmt: skip
    os.environ.update(env)
    from agent_jobs.config import settings  # noqa: PLC0415

    settings.cache_clear()
    from agent_jobs.queue.runtime import get_runtime, set_runtime  # noqa: PLC0415
    from agent_jobs.store.admin import prepare  # noqa: PLC0415
    from agent_jobs.workflows.example_backend import ExampleBackend  # noqa: PLC0415

    set_runtime(None)
    rt = get_runtime()
    from agent_jobs.queue.app import app  # noqa: PLC0415

    # An override module (AGENT_JOBS_CELERY_CONFIG) could name another broker: refused, not run.
    used = {rt.settings.broker_url, rt.settings.directory_redis_url, app.conf.broker_url}
    if used != {broker_url}:
        raise ConfigError(
            f"bench chaos runs on a redis-server of its own ({broker_url}); its settings name "
            f"others too: {sorted(str(u) for u in used - {broker_url})}"
        )
    prepare(rt.settings.database_url).dispose()
    broker = redis.Redis.from_url(broker_url)
    broker.flushdb()  # the bench's own server, just started: nothing of anyone else's
    ledger = ExampleBackend()
    for fault, times, delay in (
        ("drop_after_commit", tasks // 10, 0.0),
        ("timeout", tasks // 10, 0.0),
        ("hang_after_commit", tasks // 20, 1.5),
        ("slow", tasks // 20, 1.0),
    ):
        ledger.arm("transfer", fault, times=times, delay_s=delay)  # type: ignore[arg-type]
    ledger.arm("lookup", "error", times=tasks // 20)
    ledger.arm("read", "error", times=tasks // 10)

    say(progress, f"logs and ledger in {tmp}")
    pool = [WorkerProcess(env, name=f"chaos{i}", log=tmp / f"chaos{i}.log") for i in range(workers)]
    for w in pool:
        w.wait_ready()
    beat = BeatProcess(env, tmp)
    started = time.monotonic()
    ids = []
    for i in range(tasks):
        amount = rng.choice([500, 900, 1500, 150_000])  # one in four needs an approval
        data = {"account": f"acc_{i}", "amount_minor": amount, "reads": rng.randint(0, 2)}
        ids.append(
            rt.orchestrator.submit(
                f"chaos{i % 10}",
                f"req-{i}",
                TaskRequest(workflow="example@1", input=data),
                requester="chaos-client",
            ).task.id
        )
    say(progress, f"submitted {tasks} payouts over 10 tenants")
    kills = 0
    flushed = 0
    next_kill = time.monotonic() + kill_every_s
    flush_at = [started + (k + 1) * FLUSH_EVERY_KILLS * kill_every_s for k in range(flushes)]
    deadline = started + timeout_s
    try:
        while time.monotonic() < deadline:
            for approval in rt.store.list_approvals(None, status="pending", limit=500):
                # Expired or decided meanwhile: the task re-plans, nothing to do here.
                with contextlib.suppress(Exception):
                    rt.orchestrator.decide_approval(
                        approval.approval_id, "chaos-approver", grant=True
                    )
            now = time.monotonic()
            if now >= next_kill:
                victim = rng.randrange(len(pool))
                pool[victim].sigkill()
                kills += 1
                name = f"chaos{workers + kills}"
                pool[victim] = WorkerProcess(env, name=name, log=tmp / f"{name}.log")
                next_kill = now + kill_every_s
            if flush_at and now >= flush_at[0]:
                flush_at.pop(0)
                broker.flushdb()
                flushed += 1
                say(progress, f"flushed the broker ({flushed}/{flushes})")
            done = rt.store.count_in_status(ids, Status.COMPLETED)
            terminal = sum(rt.store.count_in_status(ids, s) for s in TERMINAL)
            say(progress, f"{terminal}/{tasks} terminal ({done} completed), {kills} workers killed")
            if terminal == tasks:
                break
            time.sleep(1.0)
    finally:
        beat.stop()
        for w in pool:
            w.stop()
    elapsed = time.monotonic() - started
    statuses = Counter(rt.store.get(t).status.value for t in ids)
    per_key = Counter(tr.idempotency_key for tr in ledger.transfers())
    duplicates = sum(n - 1 for n in per_key.values() if n > 1)
    lost = sum(n for s, n in statuses.items() if Status(s) not in TERMINAL)
    unknown_entries = sum(
        1 for t in ids for e in rt.store.events(t) if e.to_status is Status.EXEC_UNKNOWN
    )
    committed = sum(1 for t in ids for e in rt.store.effects(t) if e.status == "committed")
    return {
        "tasks": tasks, "statuses": dict(statuses), "lost": lost, "duplicate_effects": duplicates,
        "transfers": len(per_key), "effects_committed": committed, "workers_killed": kills,
        "broker_flushes": flushed, "exec_unknown_entries": unknown_entries,
        "elapsed_s": round(elapsed, 1), "seed": seed, "logs": str(tmp),
    }  # fmt: skip


def render(r: dict[str, Any]) -> str:
    ok = r["lost"] == 0 and r["duplicate_effects"] == 0
    return "\n".join([
        f"bench chaos: {r['tasks']} payouts, {r['workers_killed']} workers SIGKILLed, "
        f"broker flushed {r['broker_flushes']}x, {r['elapsed_s']} s (seed {r['seed']})",
        f"  final statuses         {r['statuses']}",
        f"  EXEC_UNKNOWN entries   {r['exec_unknown_entries']} (all reconciled by idempotency key)",
        f"  transfers in ledger    {r['transfers']}   effects committed {r['effects_committed']}",
        f"  lost tasks             {r['lost']}",
        f"  duplicate effects      {r['duplicate_effects']}",
        f"  -> {'zero lost, zero duplicates' if ok else 'FAILED'}",
    ])  # fmt: skip
