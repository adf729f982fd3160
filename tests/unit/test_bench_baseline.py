"""`agent-jobs bench platform --baseline DIR`: which code each run is, in which order, and the
arithmetic of the comparison. The benchmark itself is smoke-tested in
tests/integration/test_bench_platform.py; here the child is a real process on a checkout made
for the test."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench import baseline
from agent_jobs.core.errors import ConfigError


def fake_checkout(root: Path, answer: str) -> Path:
    """A checkout whose `python -m agent_jobs.cli` prints `answer` and where it ran."""
    cli = root / "agent_jobs" / "cli"
    cli.mkdir(parents=True)
    (root / "agent_jobs" / "__init__.py").write_text("", encoding="utf-8")
    (cli / "__init__.py").write_text("", encoding="utf-8")
    (cli / "__main__.py").write_text(
        "import json, os, sys\n"
        f"print('noise'); print(json.dumps({{'answer': {answer!r}, 'argv': sys.argv[1:], "
        "'cwd': os.getcwd()}))\n",
        encoding="utf-8",
    )
    return root


def test_a_child_runs_the_code_it_is_given_from_an_empty_directory(tmp_path: Path) -> None:
    root = fake_checkout(tmp_path / "before", "the baseline")
    got = baseline.run_child(baseline.code_root(root), ["bench", "platform", "--json"])
    assert got["answer"] == "the baseline"  # its own package, not this checkout's
    assert got["argv"] == ["bench", "platform", "--json"]
    assert Path(got["cwd"]).resolve() not in (root, baseline.current_root())


def test_a_child_that_prints_no_result_says_why(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    (root / "agent_jobs" / "cli").mkdir(parents=True)
    (root / "agent_jobs" / "__init__.py").write_text("", encoding="utf-8")
    (root / "agent_jobs" / "cli" / "__init__.py").write_text("", encoding="utf-8")
    (root / "agent_jobs" / "cli" / "__main__.py").write_text(
        "raise SystemExit('the database is not there')\n", encoding="utf-8"
    )
    with pytest.raises(RuntimeError, match="the database is not there"):
        baseline.run_child(root, [])


def test_a_directory_without_the_package_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no agent_jobs package"):
        baseline.code_root(tmp_path)
    assert baseline.code_root(baseline.current_root()) == baseline.current_root()


def test_pairs_alternate_abba_and_the_ratios_are_current_over_baseline() -> None:
    order: list[str] = []
    figures = {"baseline": [40.0, 50.0, 60.0], "current": [44.0, 50.0, 66.0]}

    def run(root: Path, argv: Sequence[str]) -> dict[str, Any]:
        side = "baseline" if root == Path("/before") else "current"
        order.append(side)
        n = sum(1 for s in order if s == side) - 1
        return {"median": {"platform_ms": figures[side][n]}, "worker_cpu_ms_per_task": 10.0}

    r = baseline.run_pairs(
        ["bench", "platform"],
        Path("/before"),
        3,
        lambda d: {"platform_ms": d["median"]["platform_ms"], "cpu": d["worker_cpu_ms_per_task"]},
        run=run,
    )
    assert order == ["baseline", "current", "current", "baseline", "baseline", "current"]
    assert r["median"]["baseline"]["platform_ms"] == 50.0
    assert r["median"]["current"]["platform_ms"] == 50.0
    assert r["pair_ratios"] == [1.1, 1.0, 1.1]
    assert r["ratio"] == 1.0 and r["pair_ratio_median"] == 1.1
    assert "pair ratios 1.0 to 1.1" in baseline.render(r)
    with pytest.raises(ConfigError):
        baseline.run_pairs([], Path("/before"), 0, dict, run=run)


def test_bench_peers_side_by_side_passes_its_sizes_and_compares_the_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench peers --baseline DIR`: each child runs the same sizes as JSON; the comparison
    carries our rate, CPU and both peer ratios (DBOS's only where it ran)."""
    import json

    from agent_jobs.cli import build_parser
    from agent_jobs.cli.bench import _peers_side_by_side

    root = fake_checkout(tmp_path / "before", "unused")
    args = build_parser().parse_args(
        ["bench", "peers", "--baseline", str(root), "--pairs", "2", "--tasks", "3",
         "--steps", "7", "--rounds", "2", "--no-dbos", "--json", "--wipe", "aj_bench_x"]
    )  # fmt: skip
    seen: list[tuple[Path, list[str]]] = []

    def run(where: Path, argv: Sequence[str]) -> dict[str, Any]:
        seen.append((where, list(argv)))
        fast = where != root
        return {
            "steps_per_s": 1100.0 if fast else 1000.0,
            "cpu_ms_per_step": 0.9,
            "ratio_celery": 0.55 if fast else 0.5,
            "ratio_dbos": None,
        }

    assert _peers_side_by_side(args, run=run) == 0
    out = json.loads(capsys.readouterr().out)
    here = baseline.current_root()
    assert [w for w, _ in seen] == [root, here, here, root]  # ABBA
    argv = seen[0][1]
    assert argv[:3] == ["bench", "peers", "--json"] and "--no-dbos" in argv
    assert argv[argv.index("--tasks") + 1] == "3" and argv[argv.index("--steps") + 1] == "7"
    assert "--baseline" not in argv  # a child never recurses
    assert argv[-2:] == ["--wipe", "aj_bench_x"]  # each child may empty what the caller allowed
    assert out["headline"] == "steps_per_s" and out["ratio"] == 1.1
    assert out["median"]["current"]["ratio_celery"] == 0.55
    assert "ratio_dbos" not in out["median"]["current"]
    text = baseline.render(out)
    assert "0.550" in text and "1,100.0" in text
