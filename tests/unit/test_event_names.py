"""Every event name the orchestrator can write is made to happen by at least one test.

The names are read from the orchestrator's source (each `Patch(event=...)` and each event it
appends), so a new branch without a test fails here. A test "names" an event when it asserts on
it as a quoted string; the tests that do are listed in the failure message's absence.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "agent_jobs" / "orchestrator").glob("*.py"))
TESTS = [p for p in (ROOT / "tests").rglob("test_*.py") if p.name != Path(__file__).name]


def orchestrator_event_names() -> set[str]:
    names: set[str] = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "event" and isinstance(kw.value, ast.Constant):
                    names.add(str(kw.value.value))
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            # self._emit(task_id, "name", data) and note(rt, "name", ...) are not transitions;
            # _emit's events are audit records the orchestrator writes too.
            if called == "_emit" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                names.add(str(node.args[1].value))
    return names


def test_the_source_scan_finds_the_known_branches() -> None:
    names = orchestrator_event_names()
    # A sanity floor: if the scan broke, it would find nothing and pass vacuously.
    assert {"dead_lettered", "verify_exhausted", "reconcile_exhausted", "step_failed"} <= names
    assert len(names) >= 25


def test_every_orchestrator_event_name_appears_in_a_test() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in TESTS)
    missing = sorted(n for n in orchestrator_event_names() if f'"{n}"' not in text)
    assert missing == [], f"event names no test makes happen: {missing}"


def test_every_note_the_orchestrator_writes_reaches_workflows_as_a_typed_resumption() -> None:
    from agent_jobs.orchestrator.steps import resumed_from
    from agent_jobs.orchestrator.workflow import RESUME_KINDS

    kinds: set[str] = {"approval_denied", "approval_expired"}  # written through a variable
    # The steps live in several modules (steps.py and the mixins it is made of): scan them all.
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "note"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
            ):
                kinds.add(str(node.args[1].value))
    assert kinds == set(RESUME_KINDS)
    resumed = resumed_from(
        {"runtime": {"notes": [{"kind": "effect_rejected", "code": "insufficient_funds", "x": 1}]}}
    )
    assert resumed is not None
    assert (resumed.kind, resumed.code, dict(resumed.detail)) == (
        "effect_rejected",
        "insufficient_funds",
        {"x": 1},
    )
    assert resumed_from({"runtime": {"notes": [{"kind": "made_up"}]}}) is None
    assert resumed_from({}) is None
