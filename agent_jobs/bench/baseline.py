"""Side by side with another checkout: `agent-jobs bench platform|peers --baseline DIR`.

How a change is shown not to slow the platform down: the benchmark runs as a child process,
alternately on the code in DIR (a git worktree of the commit to compare with:
`git worktree add ../before <commit>`) and on this checkout, in ABBA order (`common.abba`: the
second of a pair runs on a database a run larger and a machine that drifted, so neither side is
always second). Each child finds its code first on `PYTHONPATH` and runs from an empty working
directory, so neither checkout's directory shadows the other's. Both sides share the
benchmark's database and broker; a baseline whose schema differs from this one's is refused by
its own startup check.

Reported: each side's median, their ratio, and each pair's ratio (its spread is the machine's
noise: quote it with the medians).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent_jobs.bench.common import abba, median
from agent_jobs.core.errors import ConfigError

SIDES = ("baseline", "current")
# A child that has not answered in this long is stuck (a platform run of 30 tasks takes ~15 s).
CHILD_TIMEOUT_S = 1800.0


def code_root(path: str | Path) -> Path:
    """The directory that holds a checkout's `agent_jobs` package, or `ConfigError`."""
    root = Path(path).expanduser().resolve()
    if not (root / "agent_jobs" / "__init__.py").is_file():
        raise ConfigError(
            f"--baseline {path}: no agent_jobs package there "
            "(give a checkout's root, e.g. `git worktree add ../before <commit>`)"
        )
    return root


def current_root() -> Path:
    return Path(__file__).resolve().parents[2]


def run_child(root: Path, argv: Sequence[str]) -> dict[str, Any]:
    """`python -m agent_jobs.cli ARGV` on the code under `root`; its one JSON object. A child
    that prints none fails with its last line of error output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="agent-jobs-side-") as empty:
        done = subprocess.run(
            [sys.executable, "-m", "agent_jobs.cli", *argv],
            cwd=empty,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        why = errors[-1] if errors else f"exit status {done.returncode}"
        raise RuntimeError(f"the run on {root} printed no result: {why}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def run_pairs(
    argv: Sequence[str],
    baseline: Path,
    pairs: int,
    figures: Callable[[dict[str, Any]], dict[str, float]],
    *,
    progress: Callable[[str], None] | None = None,
    run: Callable[[Path, Sequence[str]], dict[str, Any]] = run_child,
) -> dict[str, Any]:
    """`pairs` pairs of runs of `argv`, ABBA; `figures` picks what each run is compared by (its
    first key is the headline)."""
    if pairs < 1:
        raise ConfigError("--pairs must be at least 1")
    roots = {"baseline": baseline, "current": current_root()}
    runs: list[dict[str, Any]] = []
    for i in range(pairs):
        for side in abba(i, list(SIDES)):
            got = figures(run(roots[side], argv))
            runs.append({"pair": i + 1, "side": side, **got})
            if progress is not None:
                shown = ", ".join(f"{k} {_num(v)}" for k, v in got.items())
                progress(f"pair {i + 1}/{pairs}: {side:<8} {shown}")
    return summarize(runs, baseline=str(baseline), current=str(roots["current"]))


def summarize(runs: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    """Each side's median of every figure, the ratio of the medians (current / baseline), and
    each pair's ratio of the headline figure (the first after `pair` and `side`)."""
    names = [k for k in runs[0] if k not in ("pair", "side")]
    by_side = {s: [r for r in runs if r["side"] == s] for s in SIDES}
    medians = {
        s: {n: round(median([float(r[n]) for r in by_side[s]]), 3) for n in names} for s in SIDES
    }
    headline = names[0]
    ratios = []
    for pair in sorted({r["pair"] for r in runs}):
        sides = {r["side"]: float(r[headline]) for r in runs if r["pair"] == pair}
        if sides.get("baseline"):
            ratios.append(round(sides["current"] / sides["baseline"], 3))
    base = medians["baseline"][headline]
    return {
        **meta,
        "pairs": len(ratios),
        "headline": headline,
        "runs": runs,
        "median": medians,
        "ratio": round(medians["current"][headline] / base, 3) if base else None,
        "pair_ratios": ratios,
        "pair_ratio_median": round(median(ratios), 3) if ratios else None,
    }


def _num(v: float) -> str:
    """A figure as read: rates and milliseconds to a tenth, ratios (under 10) to a thousandth."""
    return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"


def render(r: dict[str, Any]) -> str:
    names = list(r["median"]["current"])
    lines = [
        f"side by side: {r['pairs']} alternating pairs (ABBA), current / baseline",
        f"  baseline {r['baseline']}",
        f"  current  {r['current']}",
        "  " + f"{'':<10}" + "".join(f"{n:>24}" for n in names),
    ]
    for side in SIDES:
        cells = "".join(f"{_num(r['median'][side][n]):>24}" for n in names)
        lines.append(f"  {side:<10}{cells}")
    spread = r["pair_ratios"]
    lines.append(
        f"  {r['headline']}: ratio of medians {r['ratio']}, pair ratios "
        f"{min(spread)} to {max(spread)} (median {r['pair_ratio_median']})"
    )
    return "\n".join(lines)
