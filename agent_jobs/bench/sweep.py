"""`agent-jobs bench sweep`: what a full sweep (every sweeper once) costs with `rows` finished
tasks and `due` due ones, against the same sweep with `small` finished tasks (invariant 10:
the cost follows what is due, not the size of the table, thanks to the partial indexes)."""

from __future__ import annotations

import time
from typing import Any

from agent_jobs.bench.common import median, require_services
from agent_jobs.bench.common import progress as say
from agent_jobs.orchestrator.ports import NeverLost, NullObserver
from agent_jobs.store import Dispatch

TARGET_RATIO = 2.0
SEED_BATCH = 100_000


class _Dropping:
    """The sweepers' publisher: the bench times the sweeps, not a broker."""

    def publish(self, dispatch: Dispatch) -> None:
        pass

    def finished(self, task_id: str, tenant_id: str, seconds: float) -> None:
        pass


class _DeadLetters(NullObserver):
    """Counts the sweeps' dead letters: a due task is seeded to be moved, never given up on
    (a row a sweeper cannot move is dead-lettered, not a crash; here there must be none)."""

    def __init__(self) -> None:
        self.count = 0

    def dead_letter(self, workflow: str) -> None:
        self.count += 1


def run(*, rows: int, small: int, due: int, repeats: int, progress: bool = True) -> dict[str, Any]:
    require_services()
    from agent_jobs.config import settings  # noqa: PLC0415
    from agent_jobs.orchestrator.sweepers import Sweepers  # noqa: PLC0415
    from agent_jobs.store.admin import analyze, prepare  # noqa: PLC0415
    from agent_jobs.store.benchdata import DUE_KINDS, seed_due, seed_finished  # noqa: PLC0415

    show = progress
    # A lapsed lease's retry is never due within the sweep that made it (with a short backoff,
    # as a test's environment sets, the retry sweeper found some of them again: 22 of 20).
    cfg = settings().with_overrides(
        sweep_batch=max(500, due), retry_base_s=3600.0, retry_max_s=7200.0
    )
    store = prepare(cfg.database_url)
    per_kind = max(1, due // len(DUE_KINDS))
    seed_due(store, per_kind)
    seed_finished(store, 0, small)
    analyze(store)
    publisher = _Dropping()
    dead = _DeadLetters()
    sweepers = Sweepers(store, publisher, cfg, NeverLost(), dead)

    def measure(label: str) -> tuple[float, int]:
        times = []
        found = 0
        for _ in range(repeats):
            seed_due(store, per_kind)  # as seeded again: the last sweep moved some of them
            start = time.perf_counter()
            report = sweepers.all()
            times.append((time.perf_counter() - start) * 1000)
            # What each sweeper took, not what it published: a lapsed lease is now a failed
            # attempt that waits out its backoff, and publishes nothing.
            found = sum(report.counts[kind] for kind in DUE_KINDS)
        say(
            show,
            f"{label}: median {median(times):.1f} ms over {repeats} sweeps, {found} tasks due each",
        )
        return median(times), found

    small_ms, small_found = measure(f"{small:,} finished tasks")
    seeded = small
    while seeded < rows:
        batch = min(SEED_BATCH, rows - seeded)
        seed_finished(store, seeded, batch)
        seeded += batch
        say(show, f"seeded {seeded:,}/{rows:,} finished tasks")
    analyze(store)
    large_ms, large_found = measure(f"{rows:,} finished tasks")
    store.dispose()
    return {
        "large_ms": round(large_ms, 2), "small_ms": round(small_ms, 2),
        "ratio": round(large_ms / small_ms, 2), "target_ratio": TARGET_RATIO,
        "rows": rows, "small": small, "due": per_kind * len(DUE_KINDS),
        "due_found": {"small": small_found, "large": large_found}, "repeats": repeats,
        "dead_lettered": dead.count,
    }  # fmt: skip


def render(r: dict[str, Any]) -> str:
    verdict = "meets" if r["ratio"] <= r["target_ratio"] else "MISSES"
    return "\n".join([
        f"bench sweep: every sweeper once over {r['due']} due tasks, median of {r['repeats']} sweeps",
        f"  {r['small']:>9,} finished tasks   {r['small_ms']:8.2f} ms",
        f"  {r['rows']:>9,} finished tasks   {r['large_ms']:8.2f} ms",
        f"  ratio                     {r['ratio']:8.2f}   target <= {r['target_ratio']:g} ({verdict})",
        f"  dead-lettered by the sweeps {r['dead_lettered']} (a due task is moved, never given up)",
    ])  # fmt: skip
