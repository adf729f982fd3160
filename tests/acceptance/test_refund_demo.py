"""`agent-jobs demo refund` and `agent-jobs cost`, run as the real CLI in a subprocess.

The demo is the seed's incident end to end: a worker process SIGKILLed while it reconciles, a
lease that lapses, reconciliation by idempotency key on another worker. It exits 0 only if every
check it prints passed, and its last line is the ledger check from `GET /admin/world`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # The demo sets up its own embedded environment; drop the test session's broker settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    return subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_the_refund_demo_ends_with_exactly_one_refund() -> None:
    run = _cli("demo", "refund")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[-1].startswith("ledger check (GET /admin/world): 1 refund(s): rf_3301 pay_8472_b")
    assert lines[-1].endswith("-> exactly one refund")
    assert "FAILED" not in run.stdout
    for step in ("lease_expired", "reconciled_found", "approval_granted", "effect_unknown"):
        assert step in run.stdout
    assert "is processing" in run.stdout


def test_cost_prints_the_seeds_figures() -> None:
    run = _cli("cost")
    assert run.returncode == 0, run.stderr
    for figure in ("25,240", "770", "9,434", "5.664", "4.364", "7,874", "2.564", "4.24", "5.08"):
        assert figure in run.stdout
    as_json = _cli("cost", "--json")
    assert '"cost_inr": "5.664"' in as_json.stdout and '"cost_inr": "2.564"' in as_json.stdout
