"""The example ledger's `throttle` fault: refused before committing, with the delay to wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_jobs.workflows.example_backend import (
    BackendThrottled,
    BackendUnavailable,
    ExampleBackend,
)


@pytest.mark.parametrize("operation", ["transfer", "lookup", "read"])
def test_a_throttled_call_commits_nothing_and_says_when(tmp_path: Path, operation: str) -> None:
    ledger = ExampleBackend(tmp_path / "ledger.db")
    ledger.arm(operation, "throttle", delay_s=2.5)  # type: ignore[arg-type]
    with pytest.raises(BackendThrottled) as e:
        if operation == "transfer":
            ledger.transfer("payout:acme:r1", "acc_42", 1500, "EUR")
        elif operation == "lookup":
            ledger.lookup("payout:acme:r1")
        else:
            ledger.read_account("acc_42")
    assert e.value.retry_after_s == 2.5
    assert isinstance(e.value, BackendUnavailable)  # callers unaware of throttling stay safe
    assert ledger.transfers() == []
    # the same call afterwards goes through (one fault, one call)
    assert ledger.transfer("payout:acme:r1", "acc_42", 1500, "EUR").transfer_id == "tr_1001"
