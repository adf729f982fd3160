"""`agent-jobs bench recovery`: how long a task whose worker was SIGKILLed mid-step waits before
it moves again, with step acks kept in the worker's memory (`AGENT_JOBS_STEP_ACKS=memory`, the
default) and in kombu's unacked bookkeeping in Redis (`broker`), side by side in one run.

Each round runs both modes (ABBA order between rounds), each on a clean database and a queue
prefix of its own (`Phase`): two worker processes (the bench app, solo pool), a beat running the
sweepers, and the same short timings for both modes (`TIMINGS`). It keeps `tasks` no-op tasks
running over `TENANTS` tenants (half quick steps, with no lease; half leased, each step sleeping
`SLEEP_MS`), each replaced by a new one of its kind as it completes, and SIGKILLs a worker `kills`
times, one every `KILL_EVERY_S`, starting a replacement each time (a new name: a new lease owner).

Recovery is read from the event log afterwards. For each kill and each task, the commit (an event
with a status) before the kill and the one after it: a task the kill stalled waits at least
`STALL_FRACTION` of the shorter of grace and lease for its next commit (the sweepers cannot act
sooner), a task merely queued behind the others a normal hand-off. Recovery is the kill to that
next commit. Its path: `lease` if the lease sweeper's `lease_expired` lies between the commits,
else `dispatch` (the dispatch sweeper, for a step with no lease or a publish that never
happened). Neither mode redelivers before kombu's 600 s visibility timeout, so both should be
bound by the sweepers alike: the figure to read is the ratio memory/broker, near 1.

Lost: tasks not terminal when the run ends (`DRAIN_S` after the last kill's window).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis

from agent_jobs.bench.common import (
    Phase,
    abba,
    bench_env,
    median,
    require_services,
    wait,
)
from agent_jobs.bench.common import progress as say
from agent_jobs.bench.procs import BeatProcess, bench_worker
from agent_jobs.core.names import STEP_TASK, control_queue
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.queue.celery_config import VISIBILITY_TIMEOUT_S

MODES = ["memory", "broker"]
TIMINGS = {
    "AGENT_JOBS_DISPATCH_GRACE_S": "2",
    "AGENT_JOBS_SWEEP_INTERVAL_S": "0.5",
    "AGENT_JOBS_LEASE_TTL_S": "3",
}
WORKERS = 2
# Tenants the tasks are spread over. Beat's sweeps reach the workers through the control queue,
# which takes its turn in the workers' round robin over every queue they consume: with a tenant
# queue for each of 20 busy tasks and 12 sweeps a second (a 0.5 s interval), the control queue
# fell behind, the sweeps expired in it unrun (`expires`: one interval, at least 1 s), and a
# stalled task waited for the load to end. A few tenant queues keep the sweeps running on time;
# `control_queue_max_*` shows whether they were.
TENANTS = 4
STEPS = 40  # steps per task; a completed task is replaced, so the load outlasts the kills
SLEEP_MS = 20  # the leased tasks' steps (a step with `sleep_ms` takes a lease)
FIRST_KILL_S = 2.0  # after the first submissions: the queues are flowing
# Between kills: longer than the slower sweeper path (lease TTL + a sweep interval) and then
# some, so one kill's stall is over before the next kill.
KILL_EVERY_S = (
    max(float(TIMINGS["AGENT_JOBS_LEASE_TTL_S"]), float(TIMINGS["AGENT_JOBS_DISPATCH_GRACE_S"]))
    + 2.0
)
# A stall: at least this fraction of the shorter sweeper bound (a normal hand-off, queued behind
# the other tasks, is a fraction of a second).
STALL_FRACTION = 0.5
DRAIN_S = 60.0
POLL_S = 0.2


@dataclass
class Stall:
    kill: int
    task: str
    kind: str  # quick | leased
    path: str  # lease | dispatch
    recovery_s: float


@dataclass
class ModeRun:
    """One mode's phase in one round."""

    mode: str
    label: str  # for progress lines: "memory r1/2"
    kills: list[datetime] = field(default_factory=list)
    submitted: int = 0
    completed: int = 0
    other_terminal: int = 0
    lost: int = 0
    stalls: list[Stall] = field(default_factory=list)
    # Stalls spanning no kill: (seconds from the first kill to the commit before, gap, kind).
    unexplained: list[tuple[float, float, str]] = field(default_factory=list)
    handoffs: list[float] = field(default_factory=list)
    unacked: int = 0  # step messages left in kombu's unacked hash
    control_max: int = 0  # the sweeps' queue at its deepest (sampled)
    overlapping: int = 0  # stalls that outlasted the next kill


def run(
    *, tasks: int = 20, kills: int = 5, rounds: int = 2, progress: bool = True
) -> dict[str, Any]:
    require_services()
    if tasks < 2 or kills < 1 or rounds < 1:
        raise ValueError("--tasks must be at least 2, --kills and --rounds at least 1")
    show = progress
    runs: list[ModeRun] = []
    for r in range(rounds):
        for mode in abba(r, list(MODES)):
            one = _phase(mode, f"{mode} r{r + 1}/{rounds}", tasks, kills, show)
            runs.append(one)
            rec = [s.recovery_s for s in one.stalls]
            say(show, f"[{one.label}] {len(one.stalls)} of {kills} kills caught a step in flight, "
                 f"recovery median {_fmt(median(rec) if rec else None)} s, max {_fmt(max(rec) if rec else None)} s; "
                 f"{one.completed}/{one.submitted} completed, {one.lost} lost")  # fmt: skip
    return _result(runs, tasks, kills, rounds)


def _phase(mode: str, label: str, tasks: int, kills: int, show: bool) -> ModeRun:
    out = ModeRun(mode, label)
    env = {**TIMINGS, "AGENT_JOBS_STEP_ACKS": mode}
    stall_s = STALL_FRACTION * min(
        float(TIMINGS["AGENT_JOBS_DISPATCH_GRACE_S"]), float(TIMINGS["AGENT_JOBS_LEASE_TTL_S"])
    )
    with (
        Phase(label, WORKERS, show, env) as ph,
        BeatProcess(bench_env(ph.env), ph.logdir, app=ph.app),
    ):
        # Sets the broker's sentinel for this new prefix now, before any task exists: the first
        # sweep would otherwise take it for a broker that lost its messages and re-dispatch
        # every task waiting at that moment. (Its warning says just that: not shown.)
        sweep_log = logging.getLogger(Sweepers.__module__)
        level = sweep_log.level
        sweep_log.setLevel(logging.ERROR)
        try:
            ph.rt.sweepers.dispatch()
        finally:
            sweep_log.setLevel(level)
        kind_of = _drive(ph, out, tasks, kills, show)
        _analyse(out, ph.rt.store, list(kind_of), kind_of, stall_s)
        out.unacked = _take_unacked_steps(
            ph.rt.settings.broker_url, ph.env["AGENT_JOBS_QUEUE_PREFIX"]
        )
    return out


def _take_unacked_steps(broker_url: str, prefix: str) -> int:
    """Step messages of this phase left in kombu's unacked hash: the killed workers' in broker
    mode, none in memory mode (it shows that the two modes did differ). Every message of this
    phase there (a sweep a worker was killed in keeps kombu's bookkeeping in both modes) is
    removed: kombu would restore it into this phase's dead queues after its visibility timeout."""
    from kombu.transport import redis as kombu_redis  # noqa: PLC0415

    channel: Any = kombu_redis.Channel
    client = redis.Redis.from_url(broker_url)
    try:
        ours, steps = [], 0
        for tag, raw in client.hgetall(channel.unacked_key).items():
            try:
                message, _exchange, routing_key = json.loads(raw)
            except ValueError:
                continue
            if str(routing_key).startswith(f"{prefix}."):
                ours.append(tag)
                steps += (message.get("headers") or {}).get("task") == STEP_TASK
        if ours:
            client.hdel(channel.unacked_key, *ours)
            client.zrem(channel.unacked_index_key, *ours)
        return steps
    finally:
        client.close()


def _drive(ph: Phase, out: ModeRun, tasks: int, kills: int, show: bool) -> dict[str, str]:
    """Keep `tasks` tasks running, SIGKILL a worker `kills` times, wait for the last tasks.
    Returns every task submitted, with its kind."""
    store = ph.rt.store
    kinds = ["leased" if i % 2 else "quick" for i in range(tasks)]
    kind_of: dict[str, str] = {}

    def submit(i: int) -> str:
        data: dict[str, Any] = {"steps": STEPS}
        if kinds[i] == "leased":
            data["sleep_ms"] = SLEEP_MS
        # A slot keeps its tenant: the workers go on consuming known queues.
        task_id = ph.submit(f"recovery{i % TENANTS}", data)
        kind_of[task_id] = kinds[i]
        return task_id

    # Warm-up, not measured: the workers learn the tenant queues (this process's `add_consumer`
    # broadcast is not on the phase's control exchange; a worker's next queue sync finds them).
    warm = [ph.submit(f"recovery{t}", {"steps": 1}) for t in range(min(TENANTS, tasks))]
    wait(lambda: all(store.get(t).status in TERMINAL for t in warm), 60, POLL_S, "the warm-up")
    control = redis.Redis.from_url(ph.rt.settings.broker_url)
    queue = control_queue(ph.env["AGENT_JOBS_QUEUE_PREFIX"])
    active = {i: submit(i) for i in range(tasks)}
    start = time.monotonic()
    kill_at = [start + FIRST_KILL_S + k * KILL_EVERY_S for k in range(kills)]
    stop_at = kill_at[-1] + KILL_EVERY_S
    while time.monotonic() < stop_at:
        if kill_at and time.monotonic() >= kill_at[0]:
            kill_at.pop(0)
            _kill(ph, out, kills, show)
        for i, task_id in list(active.items()):
            if store.get(task_id).status in TERMINAL:
                active[i] = submit(i)
        out.control_max = max(out.control_max, int(control.llen(queue)))
        time.sleep(POLL_S)
    control.close()
    say(show, f"[{out.label}] kills done; waiting for the {len(active)} running tasks")
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline:
        if all(store.get(t).status in TERMINAL for t in active.values()):
            break
        time.sleep(POLL_S)
    return kind_of


def _kill(ph: Phase, out: ModeRun, kills: int, show: bool) -> None:
    """SIGKILL the workers in turn (the instant by the database clock, as the events'), and start
    a replacement as `start_workers` starts them, under a new name (a new lease owner)."""
    victim = len(out.kills) % len(ph.procs)
    for w in ph.procs:
        w.wait_ready()  # the replacement started at the previous kill
    ph.procs[victim].sigkill()  # returns once the process group is gone
    # After it: a commit the victim made as it was killed comes before this instant.
    out.kills.append(ph.rt.store.db_now())
    name = f"bench{WORKERS + len(out.kills) - 1}"
    ph.procs[victim] = bench_worker(bench_env(ph.env), name, ph.logdir, app=ph.app)
    say(
        show,
        f"[{out.label}] kill {len(out.kills)}/{kills}: worker {victim} SIGKILLed, {name} starting",
    )


def _analyse(
    out: ModeRun, store: Any, ids: list[str], kind_of: dict[str, str], stall_s: float
) -> None:
    """Stalls, their recovery and path, from each task's event log (database timestamps, as the
    kill instants)."""
    out.submitted = len(ids)
    for task_id in ids:
        status = store.get(task_id).status
        if status is Status.COMPLETED:
            out.completed += 1
        elif status in TERMINAL:
            out.other_terminal += 1
        else:
            out.lost += 1
        events = store.events(task_id)
        commits = [e.at for e in events if e.to_status is not None]
        expired = [e.at for e in events if e.type == "lease_expired"]
        for a, b in itertools.pairwise(commits):
            gap = (b - a).total_seconds()
            spanned = [k for k, at in enumerate(out.kills) if a <= at < b]
            if not spanned:
                out.handoffs.append(gap)
                if gap >= stall_s:
                    since = (a - out.kills[0]).total_seconds()
                    out.unexplained.append((round(since, 2), round(gap, 2), kind_of[task_id]))
                continue
            # The kill that stalled it: the first after its last commit (a step starts within
            # a hand-off of the commit before it). A stall past the next kill is flagged.
            k = spanned[0]
            out.overlapping += len(spanned) > 1
            recovery = (b - out.kills[k]).total_seconds()
            if recovery < stall_s:
                continue  # queued behind the others when the kill came: a normal hand-off
            path = "lease" if any(a < at < b for at in expired) else "dispatch"
            out.stalls.append(Stall(k, task_id, kind_of[task_id], path, recovery))


def _result(runs: list[ModeRun], tasks: int, kills: int, rounds: int) -> dict[str, Any]:
    res: dict[str, Any] = {
        "tasks": tasks,
        "kills": kills,
        "rounds": rounds,
        "workers": WORKERS,
        "tenants": TENANTS,
        "steps": STEPS,
        "sleep_ms": SLEEP_MS,
        "grace_s": float(TIMINGS["AGENT_JOBS_DISPATCH_GRACE_S"]),
        "lease_ttl_s": float(TIMINGS["AGENT_JOBS_LEASE_TTL_S"]),
        "sweep_interval_s": float(TIMINGS["AGENT_JOBS_SWEEP_INTERVAL_S"]),
        "visibility_timeout_s": float(VISIBILITY_TIMEOUT_S),
        "order": [r.mode for r in runs],
    }
    for mode in MODES:
        mine = [r for r in runs if r.mode == mode]
        stalls = [s for r in mine for s in r.stalls]
        rec = [s.recovery_s for s in stalls]
        by_path: dict[str, Any] = {}
        for path in ("dispatch", "lease"):
            values = [s.recovery_s for s in stalls if s.path == path]
            by_path[path] = {
                "n": len(values),
                "median_s": _round(median(values)) if values else None,
                "max_s": _round(max(values)) if values else None,
            }
        res.update({
            f"recovery_{mode}_s": _round(median(rec)) if rec else None,
            f"recovery_{mode}_max_s": _round(max(rec)) if rec else None,
            f"recovery_{mode}_by_path": by_path,
            f"recovery_{mode}_samples": [_round(v) for v in rec],
            f"kills_{mode}": sum(len(r.kills) for r in mine),
            f"caught_{mode}": len(stalls),
            f"submitted_{mode}": sum(r.submitted for r in mine),
            f"completed_{mode}": sum(r.completed for r in mine),
            f"other_terminal_{mode}": sum(r.other_terminal for r in mine),
            f"lost_{mode}": sum(r.lost for r in mine),
            f"unexplained_stalls_{mode}": sum(len(r.unexplained) for r in mine),
            # (round, seconds from its first kill to the commit before, gap, kind)
            f"unexplained_{mode}_samples": [
                [n, *u] for n, r in enumerate(mine) for u in r.unexplained
            ][:20],
            f"unacked_steps_{mode}": sum(r.unacked for r in mine),
            f"control_queue_max_{mode}": max(r.control_max for r in mine),
            f"overlapping_stalls_{mode}": sum(r.overlapping for r in mine),
            f"handoff_{mode}_s": _round(median([h for r in mine for h in r.handoffs]), 3),
        })  # fmt: skip
    memory, broker = res["recovery_memory_s"], res["recovery_broker_s"]
    res["ratio"] = round(memory / broker, 3) if memory and broker else None
    for path in ("dispatch", "lease"):
        m = res["recovery_memory_by_path"][path]["median_s"]
        b = res["recovery_broker_by_path"][path]["median_s"]
        res[f"ratio_{path}"] = round(m / b, 3) if m and b else None
    return res


def _round(value: float, digits: int = 2) -> float | None:
    return None if math.isnan(value) else round(value, digits)  # NaN: no samples


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def render(r: dict[str, Any]) -> str:
    lines = [
        f"bench recovery: {r['tasks']} no-op tasks running (half quick, half leased {r['sleep_ms']} ms steps), "
        f"{r['workers']} worker processes, {r['kills']} SIGKILLs per mode per round, {r['rounds']} rounds (ABBA)",
        f"  timings, both modes: dispatch grace {r['grace_s']:g} s, lease TTL {r['lease_ttl_s']:g} s, "
        f"sweep interval {r['sweep_interval_s']:g} s (kombu visibility timeout {r['visibility_timeout_s']:g} s)",
        f"  {'step acks':<10}{'recovery p50':>13}{'max':>7}  {'dispatch p50 (n)':>18}  {'lease p50 (n)':>15}"
        f"  {'caught':>8}  {'completed':>9}  {'lost':>4}  {'hand-off p50':>12}",
    ]
    for mode in MODES:
        bp = r[f"recovery_{mode}_by_path"]
        caught = f"{r[f'caught_{mode}']}/{r[f'kills_{mode}']}"
        handoff = r[f"handoff_{mode}_s"]
        lines.append(
            f"  {mode:<10}{_fmt(r[f'recovery_{mode}_s']):>11} s{_fmt(r[f'recovery_{mode}_max_s']):>5} s  "
            f"{_fmt(bp['dispatch']['median_s']):>11} s ({bp['dispatch']['n']:>2})  "
            f"{_fmt(bp['lease']['median_s']):>8} s ({bp['lease']['n']:>2})  "
            f"{caught:>8}  {r[f'completed_{mode}']:>4}/{r[f'submitted_{mode}']:<4}  {r[f'lost_{mode}']:>4}  "
            f"{_fmt(handoff, '.3f'):>10} s"
        )
    lines += [
        f"  ratio memory/broker of the median recovery: {_fmt(r['ratio'], '.3f')} (1 = as fast); "
        f"by path: dispatch {_fmt(r['ratio_dispatch'], '.3f')}, lease {_fmt(r['ratio_lease'], '.3f')} "
        "(the overall median also follows which path the kills happened to hit)",
        f"  killed step messages left in kombu's unacked hash: memory {r['unacked_steps_memory']}, "
        f"broker {r['unacked_steps_broker']} (redelivered only after the visibility timeout; removed)",
        "  recovery: from the SIGKILL to the next commit of the task whose step was in flight; "
        "'caught': kills that stalled a task",
    ]
    lines.append(
        f"  sweeps' queue at its deepest: memory {r['control_queue_max_memory']}, broker "
        f"{r['control_queue_max_broker']} messages (a deep one: sweeps expired unrun, recovery not sweeper-bound)"
    )
    odd = {m: r[f"unexplained_stalls_{m}"] for m in MODES if r[f"unexplained_stalls_{m}"]}
    if odd:
        lines.append(f"  stalls spanning no kill (at least half the grace): {odd}")
        for m in odd:
            shown = ", ".join(
                f"r{n + 1} {at:+.1f} s: {gap:.2f} s {kind}"
                for n, at, gap, kind in r[f"unexplained_{m}_samples"][:8]
            )
            lines.append(f"    {m} (round, from its first kill, gap, kind): {shown}")
    over = {m: r[f"overlapping_stalls_{m}"] for m in MODES if r[f"overlapping_stalls_{m}"]}
    if over:
        lines.append(f"  stalls that outlasted the next kill: {over}")
    if r["lost_memory"] or r["lost_broker"]:
        lines.append(f"  LOST TASKS: memory {r['lost_memory']}, broker {r['lost_broker']}")
    return "\n".join(lines)
