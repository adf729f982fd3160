"""A benchmark beside the code before a change, when the two cannot share a database (the
baseline's schema check refuses this checkout's newer migrations): `--baseline DIR
--baseline-database URL` on `bench webhooks hot-path` and `bench fairness --active`.

The baseline's children run with `AGENT_JOBS_DATABASE_URL` set to its own database (and may
empty it: `--wipe`); this checkout's on the configured one. Pairs alternate ABBA
(`bench/baseline.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

Figures = Callable[[dict[str, Any]], dict[str, float]]


def run_beside(
    args: argparse.Namespace,
    argv: list[str],
    figures: Figures,
    *,
    migrate_first: bool,
    keep: tuple[str, ...] = (),
) -> dict[str, Any]:
    """`argv` (a benchmark with `--json`) in `args.pairs` ABBA pairs on `args.baseline` and this
    checkout. With `migrate_first`, the baseline's database is migrated by the baseline's own
    code before the first run (a benchmark that checks the schema before it prepares one).
    `keep`: fields of each run's whole result kept beside the compared figures (the last run of
    each side), where a baseline's result may not have them."""
    from agent_jobs.bench import baseline  # noqa: PLC0415
    from agent_jobs.bench.common import progress  # noqa: PLC0415
    from agent_jobs.core.errors import ConfigError  # noqa: PLC0415

    if not args.baseline_database:
        raise ConfigError("--baseline needs --baseline-database URL (a database of its own)")
    root = baseline.code_root(args.baseline)
    if migrate_first:
        env = {
            **os.environ,
            "AGENT_JOBS_DATABASE_URL": args.baseline_database,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(root), os.environ.get("PYTHONPATH")) if p
            ),
        }
        subprocess.run(
            [sys.executable, "-m", "agent_jobs.cli", "db", "upgrade"],
            env=env, cwd=root, check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    own_db = urlsplit(args.baseline_database).path.lstrip("/")
    kept: dict[str, dict[str, Any]] = {}

    def run(code: Path, child_argv: Any) -> dict[str, Any]:
        side = "baseline" if code == root else "current"
        if code != root:
            got = baseline.run_child(code, child_argv)
        else:
            # The child inherits this process's environment: the baseline's database in it for
            # the child's run, then the environment as it was (copied whole, not read by name:
            # settings are read in config.py only).
            saved = os.environ.copy()
            os.environ["AGENT_JOBS_DATABASE_URL"] = args.baseline_database
            try:
                got = baseline.run_child(code, [*child_argv, "--wipe", own_db])
            finally:
                os.environ.clear()
                os.environ.update(saved)
        kept[side] = {k: got[k] for k in keep if k in got}
        return got

    result = baseline.run_pairs(
        argv,
        root,
        args.pairs,
        figures,
        progress=lambda text: progress(not args.json, text),
        run=run,
    )
    if keep:
        result["kept"] = kept
    return result


def print_result(result: dict[str, Any], as_json: bool) -> int:
    from agent_jobs.bench import baseline  # noqa: PLC0415

    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    print(baseline.render(result))
    for side, fields in result.get("kept", {}).items():
        shown = ", ".join(f"{k} {v}" for k, v in fields.items()) or "(not reported)"
        print(f"  {side:<10}{shown}")
    return 0


# `bench fairness --active N --baseline DIR --baseline-database URL`: the scale bench (its own
# 20-tenant deployment beside the scaled one, in each child) on both codes.
FAIRNESS_KEPT = (
    "queues_consumed", "redis_keys", "baseline_redis_keys", "keys_per_10k_tenants",
    "worker_rss_mb", "baseline_worker_rss_mb", "rss_mb_per_10k_tenants",
)  # fmt: skip


def fairness_figures(r: dict[str, Any]) -> dict[str, float]:
    return {
        "ratio": float(r["ratio"]),
        "transitions_per_s": float(r["transitions_per_s"]),
        "baseline_per_s": float(r["baseline_per_s"]),
    }


def fairness_beside(args: argparse.Namespace) -> int:
    argv = ["bench", "fairness", "--json", "--tenants", str(args.tenants)]
    argv += ["--active", str(args.active), "--workers", str(args.workers)]
    argv += ["--rounds", str(args.rounds or 4)]
    for name in args.wipe or ():
        argv += ["--wipe", name]
    # The scale bench creates, marks and migrates its databases itself.
    result = run_beside(args, argv, fairness_figures, migrate_first=False, keep=FAIRNESS_KEPT)
    return print_result(result, args.json)


def add_options(p: argparse.ArgumentParser, *, pairs: int) -> None:
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="side by side with the checkout in DIR (e.g. the code before a change), on "
        "--baseline-database: alternating runs of both, medians and each pair's ratio",
    )
    p.add_argument("--baseline-database", metavar="URL", help="the baseline's own database")
    p.add_argument("--pairs", type=int, default=pairs, help="with --baseline: pairs of runs")
