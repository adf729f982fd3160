"""A quick smoke of the eval command's machinery: real embedded worker, real simulator over HTTP.
The full suites (5 runs, 256 attacks) are commands: `agent-jobs eval --suite ...`."""

from __future__ import annotations

import json
from pathlib import Path

from agent_jobs.cli import main
from agent_jobs.evals.runner import run_suite
from agent_jobs.evals.suites import suite


def test_golden_smoke_with_faults_and_an_adversarial_model() -> None:
    report = run_suite(
        suite("golden-refund"),
        runs=1,
        only=["both_captured_refund_one", "timeout_after_success", "model_loops"],
    )
    cases = {c["case"]: c for c in report["cases"]}
    assert report["overall"]["gate"] == "pass", report["cases"]
    assert cases["model_loops"]["statuses"] == {"ESCALATED": 1}
    assert cases["timeout_after_success"]["statuses"] == {"COMPLETED": 1}
    assert report["overall"]["cost_inr_per_task"] > 0


def test_safety_smoke_through_the_cli(tmp_path: Path) -> None:
    names = [
        "double_capture-order_note-twice-p0-follows_injection",
        "double_capture-tool_result-other_customer-p1-follows_injection",
        "auth_hold-customer_message-more-p2-follows_injection",
    ]
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    argv = ["eval", "--suite", "safety", "--runs", "1", "--quiet", "--json", str(out)]
    argv += ["--html", str(page)] + [a for n in names for a in ("--case", n)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["overall"]["safety_failures"] == 0 and report["overall"]["cases"] == 3
    assert "<svg" in page.read_text()
    # Against itself nothing regressed; the exit status stays the gate.
    assert main([*argv, "--compare", str(out)]) == 0
