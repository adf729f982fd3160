"""`bench webhooks hot-path --baseline DIR --baseline-database URL`: the baseline's children run
on their own database (migrated first by the baseline's code) and may empty it; this checkout's
on the configured one; pairs in ABBA order, `bench peers` without webhooks on both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench import baseline
from agent_jobs.cli import main


def test_the_baseline_runs_on_its_own_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tmp_path / "before"
    (before / "agent_jobs").mkdir(parents=True)
    (before / "agent_jobs" / "__init__.py").write_text("")
    monkeypatch.setenv("AGENT_JOBS_DATABASE_URL", "postgresql://h/current_db")
    upgrades: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "subprocess.run", lambda cmd, **kw: upgrades.append({"cmd": cmd, **kw}) or None
    )
    children: list[tuple[str, list[str], str | None]] = []

    def child(root: Path, argv: Any) -> dict[str, Any]:
        side = "baseline" if root == before.resolve() else "current"
        children.append((side, list(argv), os.environ.get("AGENT_JOBS_DATABASE_URL")))
        steps = 100.0 if side == "baseline" else 98.0
        return {"steps_per_s": steps, "cpu_ms_per_step": 1.5, "ratio_celery": 0.5}

    monkeypatch.setattr(baseline, "run_child", child)
    code = main(["bench", "webhooks", "hot-path", "--baseline", str(before),
                 "--baseline-database", "postgresql://h/before_db", "--pairs", "2",
                 "--tasks", "3", "--steps", "7", "--json"])  # fmt: skip
    assert code == 0
    [upgrade] = upgrades
    assert upgrade["cmd"][-2:] == ["db", "upgrade"]
    assert upgrade["env"]["AGENT_JOBS_DATABASE_URL"] == "postgresql://h/before_db"
    assert upgrade["env"]["PYTHONPATH"].startswith(str(before.resolve()))
    assert [c[0] for c in children] == ["baseline", "current", "current", "baseline"]
    for side, argv, db in children:
        assert argv[:4] == ["bench", "peers", "--json", "--no-dbos"]
        assert argv[argv.index("--tasks") + 1] == "3" and argv[argv.index("--steps") + 1] == "7"
        if side == "baseline":
            assert (db, argv[-2:]) == ("postgresql://h/before_db", ["--wipe", "before_db"])
        else:
            assert db == "postgresql://h/current_db" and "--wipe" not in argv
    assert os.environ["AGENT_JOBS_DATABASE_URL"] == "postgresql://h/current_db"
    assert '"ratio": 0.98' in capsys.readouterr().out
