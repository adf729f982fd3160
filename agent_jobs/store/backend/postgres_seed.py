"""The Postgres backend's bulk seeding for benchmarks (`store.benchdata`): finished tasks, and
history (finished tasks with their events) spread over days, from `generate_series`. Not used
by the runtime."""

from __future__ import annotations

from agent_jobs.store.backend.statements import SEED_COLUMNS

HISTORY_REQUESTER = "history"  # marks seeded history, so a bench can tell it from its own tasks
HISTORY_DAYS = 20  # inside the default 30-day retention: what the archive sweeper has not pruned


FINISHED = f"""
    INSERT INTO tasks ({SEED_COLUMNS})
    SELECT 'tsk_fin_' || g, 'bench-t' || (g % 50), 'fin-' || g, 'sha256:x', 'noop@1', 'bench',
           '{{}}'::jsonb, '{{}}'::jsonb, 'COMPLETED', 4, NULL, NULL, 1, NULL,
           now() - interval '1 day', 0, NULL, '{{}}'::jsonb, '{{}}'::jsonb, 4,
           md5(g::text), now() - interval '1 day', now() - interval '1 day'
    FROM generate_series(:start, :stop) AS g
"""


def _history_id(g: str, created: str) -> str:
    """SQL for a seeded task's id, shaped like `new_id("tsk")` (milliseconds, then 20 hex
    digits): history sorts before the tasks created after it, as in production."""
    return (
        f"'tsk_' || lpad(to_hex((extract(epoch FROM {created}) * 1000)::bigint), 12, '0') "
        f"|| substr(md5({g}::text), 1, 20)"
    )


# A seeded task `g` and when it was created: spread evenly over the last HISTORY_DAYS, oldest
# first, ending an hour before `:anchor` (the seed's start).
_HISTORY_SOURCE = """
    SELECT g, :anchor - interval '1 hour' - make_interval(secs => (:total - g) * :spacing) AS c,
           CASE WHEN g % 100 < 90 THEN 'COMPLETED' WHEN g % 100 < 97 THEN 'FAILED'
                ELSE 'CANCELLED' END AS st
    FROM generate_series(:start, :stop) AS g
"""

HISTORY_TASKS = f"""
    INSERT INTO tasks ({SEED_COLUMNS})
    SELECT {_history_id("h.g", "h.c")}, :tenant_prefix || (h.g % :tenants), 'hist-' || h.g,
           'sha256:' || md5(h.g::text), 'noop@1', '{HISTORY_REQUESTER}',
           jsonb_build_object('steps', :events), '{{}}'::jsonb, h.st, :events, NULL, NULL, 1, NULL,
           h.c, 0, CASE WHEN h.st = 'CANCELLED' THEN h.c + interval '1 second' END,
           jsonb_build_object('left', 0), jsonb_build_object('steps', :events), :events,
           md5('trace' || h.g), h.c, h.c + interval '2 seconds'
    FROM ({_HISTORY_SOURCE}) AS h
"""

# `:events` events per task: created, started, observations, draft_ready, then the end.
HISTORY_EVENTS = f"""
    INSERT INTO task_events (task_id, seq, type, from_status, to_status, data, trace_id, at)
    SELECT {_history_id("h.g", "h.c")}, s,
           CASE WHEN s = 1 THEN 'created' WHEN s = :events THEN lower(h.st)
                WHEN s = 2 THEN 'started' WHEN s = :events - 1 THEN 'draft_ready'
                ELSE 'observed' END,
           CASE WHEN s = 1 THEN NULL WHEN s = :events THEN 'VERIFYING'
                WHEN s = 2 THEN 'RECEIVED' ELSE 'RUNNING' END,
           CASE WHEN s = 1 THEN 'RECEIVED' WHEN s = :events THEN h.st
                WHEN s = :events - 1 THEN 'VERIFYING' ELSE 'RUNNING' END,
           CASE WHEN s > 2 AND s < :events - 1 THEN '{{"note": "noop"}}'::jsonb
                ELSE '{{}}'::jsonb END,
           md5('trace' || h.g), h.c + make_interval(secs => s * 0.2)
    FROM ({_HISTORY_SOURCE}) AS h CROSS JOIN generate_series(1, :events) AS s
"""
