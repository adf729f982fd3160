"""A step its workflow keeps deferring (`Deferred`: a resource of its own stays busy) tries again
with backoff: about once a minute after its first minute, not at every sweep, on SQLite and
Postgres.

Simulated time: the sweeper runs every 5 s of it; time passes by moving the task's `held_since`
and `updated_at` back in SQL, never by sleeping. Before, every sweep released it and it deferred
again: two writes to its row (release, hold) and a claim every 5 s, 120 tries in ten minutes.
"""

from __future__ import annotations

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.store import Store
from agent_jobs.testing import Harness
from agent_jobs.workflows import builtin_registry
from tests.contract.test_deferred_release import _Busy, later

SWEEP_S = 5.0
INCIDENT_S = 600.0


def test_a_step_deferred_for_long_tries_about_once_a_minute(store: Store, tenant: str) -> None:
    busy = _Busy()
    registry = builtin_registry()
    registry.register(busy)
    h = Harness(store, registry)
    task = h.submit(tenant, "k-busy", TaskRequest(workflow="busy_resource@1", input={}))
    h.run_until_idle()
    assert store.get(task.id).held_for == "deferred"
    tries: list[float] = []  # the simulated second of each try after the first
    clock = 0.0
    while clock < INCIDENT_S:
        clock += SWEEP_S
        later(store, task.id, SWEEP_S)
        asked = busy.asked
        if h.sweepers.held():
            h.run_until_idle()
            assert busy.asked == asked + 1 and store.get(task.id).held_for == "deferred"
            tries.append(clock)
    # Each wait as long as the streak so far (at least 2 s, at most 60 s), on 5 s sweeps.
    gaps = [b - a for a, b in zip([0.0, *tries], tries, strict=False)]
    assert gaps[:5] == [5.0, 5.0, 10.0, 20.0, 40.0], gaps
    assert all(g <= 65.0 for g in gaps) and all(g >= 60.0 for g in gaps[5:]), gaps
    assert len(tries) <= 5 + 10  # not 120
    for minute in range(2, int(INCIDENT_S // 60)):
        in_it = [t for t in tries if (minute - 1) * 60 < t <= minute * 60]
        assert len(in_it) <= 1, (minute, tries)

    busy.busy = False  # the resource frees: the next try that is due goes through
    later(store, task.id, 60.0)
    assert h.sweepers.held() == 1
    assert h.settle(task.id).status is Status.COMPLETED
