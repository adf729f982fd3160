"""The eval process has a deadline: a child that hangs is killed by its pid, and the cases it
had not finished are recorded as errored with the reason (the gate fails), while a suite it
finished keeps its scores.

Before, the parent read the child's stderr until it closed and then waited without a bound: a
child that hung held `agent-jobs release eval` (and this test) forever. The hanging child here
is a stand-in for the eval module: it writes the first suite's report as the real child does
after each suite, says it started the next one, and never finishes.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from agent_jobs.evals import gate, models
from agent_jobs.evals.child import ChildTimedOut, run_child
from agent_jobs.evals.runner import release_manifest
from agent_jobs.evals.suites import suite
from agent_jobs.releases import Manifest

GOLDEN, SAFETY = "golden-refund@2", "safety@1"

HANGS_AFTER_THE_FIRST_SUITE = textwrap.dedent(
    """
    import json, sys, time
    from agent_jobs.evals.child import write_output
    from agent_jobs.evals.scoring import Score, overall, summarise

    spec_path, out_path = sys.argv[1:]
    spec = json.loads(open(spec_path).read())
    first = next(iter(spec["suites"]))
    run = Score(True, True, True, True, True, True, 1.0, 1.0, True, 0.0, 1.0, 1, "COMPLETED")
    cases = [summarise("a-finished-case", False, [run])]
    write_output(out_path, {first: {"suite": first, "runs_per_case": 1, "duration_s": 1.0,
                                    "overall": overall(cases), "cases": cases}})
    print("suite safety@1", file=sys.stderr, flush=True)
    time.sleep(3600)  # hung: a worker deadlocked, a provider that never answers
    """
)


@pytest.fixture
def hanging_child(tmp_path: Path) -> list[str]:
    script = tmp_path / "hangs.py"
    script.write_text(HANGS_AFTER_THE_FIRST_SUITE, encoding="utf-8")
    return [sys.executable, str(script)]


@pytest.fixture
def routes_file(tmp_path: Path) -> str:
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(models.routes_file_data()), encoding="utf-8")
    return str(path)


def test_a_hung_eval_child_is_killed_and_its_cases_recorded_as_errored(
    hanging_child: list[str], routes_file: str
) -> None:
    manifest = Manifest.parse({**release_manifest("honest"), "release_id": "rel-hangs"})
    said: list[str] = []
    report = gate.evaluate(
        manifest,
        routes_path=routes_file,
        runs=1,
        limit=3,
        progress=said.append,
        timeout_s=2.0,
        command=hanging_child,
    )
    reason = report["errored"]
    assert reason.startswith("the eval process (pid ") and "did not finish within 2 s" in reason
    pid = int(reason.split("pid ", 1)[1].split(")", 1)[0])
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(pid, 0)
    assert report["overall"]["gate"] == "fail"
    # The suite it finished keeps its score; each case of the one it hung in is errored.
    assert [c["case"] for c in report["suites"][GOLDEN]["cases"]] == ["a-finished-case"]
    hung = report["suites"][SAFETY]
    assert hung["errored"] == reason
    assert [c["case"] for c in hung["cases"]] == [c.name for c in suite(SAFETY).cases[:3]]
    assert all(c["error"] == reason and not c["passed"] for c in hung["cases"])
    assert said[-2:] == ["suite safety@1", reason]
    assert f"ERRORED: {reason}" in gate.text_summary(report)


def test_the_deadline_is_a_setting(
    monkeypatch: pytest.MonkeyPatch, hanging_child: list[str]
) -> None:
    """A shadow run (no cases to score) fails with the reason; the default bound is
    `AGENT_JOBS_EVAL_CHILD_TIMEOUT_S`."""
    monkeypatch.setenv("AGENT_JOBS_EVAL_CHILD_TIMEOUT_S", "1.5")
    with pytest.raises(ChildTimedOut, match=r"^the shadow process .* within 1\.5 s") as caught:
        run_child({"mode": "shadow", "suites": {"copies": None}}, command=hanging_child)
    assert set(caught.value.partial) == {"copies"}  # what it wrote before it hung
