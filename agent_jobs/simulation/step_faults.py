"""What goes wrong in one step, drawn from the seed (`draw`), and which statements write (a
step armed to die after a commit dies once a write has committed: `is_write`)."""

from __future__ import annotations

from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.workers import StepFaults
from agent_jobs.store.backend.prepared import sql_of
from agent_jobs.store.seams import DATABASE_ERRORS

# The database errors that are not an outage (the step is not tried again as one).
REFUSED = tuple(e for e in DATABASE_ERRORS if e != "connection_lost")
# The statements that write (a WITH may carry writes).
WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "WITH"})


def draw(choices: Choices, *, after_commit: bool) -> StepFaults:
    """One step's fault. `after_commit`: a death right after a commit may be drawn too (on
    Postgres; off on SQLite, whose seeds keep the draws they were measured with)."""
    kinds = ("crash", "error", "send_before", "send_after", "error_after")
    kind = choices.pick(kinds + (("after_commit",) if after_commit else ()))
    if kind == "after_commit":
        return StepFaults(after_commit=True)
    at = choices.draw(24)
    if kind == "crash":
        return StepFaults(crash_at=at)
    if kind == "error":
        return StepFaults(error_at=at, error=choices.pick(DATABASE_ERRORS))
    if kind == "error_after":
        # A statement or lock timeout, a deadlock: the database refuses the outcome of a send,
        # not an outage the step rides out (`error_at` is set when the send applies).
        return StepFaults(send="error_after", error=choices.pick(REFUSED))
    return StepFaults(send=kind.partition("_")[2])


def is_write(sql: str) -> bool:
    if sql.startswith("SELECT set_config("):
        # On Postgres the simulated clock rides in front of each statement (`use_clock` of
        # `simulated_postgres`: its value holds no ';').
        sql = sql.split(";", 1)[-1]
    words = sql_of(sql.strip()).split(None, 1)  # (a prepared statement's `EXECUTE`: its body)
    return bool(words) and words[0].upper() in WRITES
