"""`bench fairness --active N --baseline DIR --baseline-database URL`: the scale bench on the
code before a change and on this checkout, in ABBA pairs; the baseline's children on their own
database (which they create and migrate themselves: nothing is migrated first), this
checkout's on the configured one; the footprint fields each side reported are kept."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench import baseline
from agent_jobs.cli import main


def test_fairness_beside_the_code_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tmp_path / "before"
    (before / "agent_jobs").mkdir(parents=True)
    (before / "agent_jobs" / "__init__.py").write_text("")
    monkeypatch.setenv("AGENT_JOBS_DATABASE_URL", "postgresql://h/current_db")
    monkeypatch.setattr("subprocess.run", lambda *a, **kw: pytest.fail("nothing migrated first"))
    children: list[tuple[str, list[str], str | None]] = []

    def child(root: Path, argv: Any) -> dict[str, Any]:
        side = "baseline" if root == before.resolve() else "current"
        children.append((side, list(argv), os.environ.get("AGENT_JOBS_DATABASE_URL")))
        if side == "baseline":  # the code before reports no footprint
            return {"ratio": 0.5, "transitions_per_s": 100.0, "baseline_per_s": 200.0}
        return {"ratio": 0.9, "transitions_per_s": 180.0, "baseline_per_s": 200.0,
                "keys_per_10k_tenants": 0.0, "rss_mb_per_10k_tenants": 11.5}  # fmt: skip

    monkeypatch.setattr(baseline, "run_child", child)
    code = main(["bench", "fairness", "--tenants", "10000", "--active", "500",
                 "--baseline", str(before), "--baseline-database", "postgresql://h/before_db",
                 "--pairs", "2", "--json"])  # fmt: skip
    assert code == 0
    assert [c[0] for c in children] == ["baseline", "current", "current", "baseline"]
    for side, argv, db in children:
        assert argv[:3] == ["bench", "fairness", "--json"]
        assert argv[argv.index("--tenants") + 1] == "10000"
        assert argv[argv.index("--active") + 1] == "500"
        assert argv[argv.index("--rounds") + 1] == "4"  # ABBA inside each child too
        if side == "baseline":
            assert (db, argv[-2:]) == ("postgresql://h/before_db", ["--wipe", "before_db"])
        else:
            assert db == "postgresql://h/current_db" and "--wipe" not in argv
    assert os.environ["AGENT_JOBS_DATABASE_URL"] == "postgresql://h/current_db"
    out = json.loads(capsys.readouterr().out)
    assert out["headline"] == "ratio"
    assert out["median"]["baseline"]["ratio"] == 0.5
    assert out["median"]["current"]["ratio"] == 0.9
    assert out["kept"] == {
        "baseline": {},
        "current": {"keys_per_10k_tenants": 0.0, "rss_mb_per_10k_tenants": 11.5},
    }


def test_fairness_beside_needs_a_database_of_its_own(tmp_path: Path) -> None:
    before = tmp_path / "before"
    (before / "agent_jobs").mkdir(parents=True)
    (before / "agent_jobs" / "__init__.py").write_text("")
    code = main(["bench", "fairness", "--active", "5", "--baseline", str(before), "--json"])
    assert code != 0
