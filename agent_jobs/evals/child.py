"""The eval process: started without the caller's `AGENT_JOBS_*` variables, watched, bounded.

The release gate and shadow runs (`evals.gate`) run in a process of their own. A hung one (a
deadlocked worker, a provider that never answers, a simulator that stopped serving) would hold
`agent-jobs release eval` forever, so every child runs under a deadline
(`AGENT_JOBS_EVAL_CHILD_TIMEOUT_S`): past it the child is killed by its pid and what it had
finished is kept; the caller records the rest as errored, with the reason.

The child writes its output file again after each suite (replacing it whole), so a suite that
finished before the deadline keeps its scores.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_jobs.core.errors import AgentJobsError

Progress = Callable[[str], None]
# The module whose `__main__` is the eval process.
CHILD_MODULE = "agent_jobs.evals.gate"
# Progress lines kept for the error when a child fails.
_TAIL_LINES = 30


class GateError(AgentJobsError):
    """The gate could not evaluate the candidate (its route is missing, the child failed)."""

    code = "gate_error"


class ChildTimedOut(GateError):
    """The eval process passed its deadline and was killed. `partial`: what it had written
    (the suites it finished), or None; `reason`: one line a report can carry."""

    code = "gate_timeout"

    def __init__(self, reason: str, partial: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.partial = partial


def child_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The eval process's environment: this one without any `AGENT_JOBS_*` variable, so no
    production database, broker, Redis, queue prefix or secret can reach it."""
    return {k: v for k, v in environ.items() if not k.startswith("AGENT_JOBS_")}


def default_timeout_s() -> float:
    from agent_jobs.config import load_settings  # noqa: PLC0415

    return float(load_settings().eval_child_timeout_s)


def write_output(path: str | Path, data: Any) -> None:
    """Replace the output file whole (the parent may read it at any moment after a kill)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".part")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, target)


def run_child(
    spec: Mapping[str, Any],
    progress: Progress | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    timeout_s: float | None = None,
    command: Sequence[str] | None = None,
) -> Any:
    """Run `spec` (an eval or a shadow run) in a process of its own and return what it wrote.
    Its stderr lines are its progress. Past `timeout_s` (default the setting) the process is
    killed (SIGKILL to its pid) and `ChildTimedOut` carries what it had written; a child that
    fails otherwise is a `GateError` with the tail of its output. `command`: the child's argv
    before the spec and output paths (the eval module; tests put a child that hangs there)."""
    say = progress or (lambda _m: None)
    limit = default_timeout_s() if timeout_s is None else float(timeout_s)
    argv = list(command) if command is not None else [sys.executable, "-m", CHILD_MODULE]
    with tempfile.TemporaryDirectory(prefix="agent-jobs-gate-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "report.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        started = time.monotonic()
        proc = subprocess.Popen(
            [*argv, str(spec_path), str(out_path)],
            env=child_environ(os.environ if environ is None else environ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp,
        )
        tail: list[str] = []
        # Read on a thread: a child that hangs without writing must not hang the reader.
        reader = threading.Thread(target=_relay, args=(proc, say, tail), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill(proc)
            reader.join(timeout=5)
            reason = (
                f"the {spec.get('mode', 'eval')} process (pid {proc.pid}) did not finish within "
                f"{limit:g} s (AGENT_JOBS_EVAL_CHILD_TIMEOUT_S): killed after "
                f"{time.monotonic() - started:.0f} s"
            )
            say(reason)
            raise ChildTimedOut(reason, _read(out_path)) from None
        reader.join(timeout=5)
        if proc.returncode != 0 or not out_path.exists():
            raise GateError(
                f"the {spec.get('mode', 'eval')} process failed (exit {proc.returncode}): "
                + "".join(tail)[-2000:]
            )
        return _read(out_path)


def _relay(proc: subprocess.Popen[str], say: Progress, tail: list[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        say(line.rstrip("\n"))
        tail.append(line)
        del tail[:-_TAIL_LINES]


def _kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the child's pid (it may be stuck where no other signal is heard), reaped."""
    with contextlib.suppress(ProcessLookupError):  # it ended between the deadline and now
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _read(path: Path) -> Any:
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
