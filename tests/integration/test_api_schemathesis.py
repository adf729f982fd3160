"""Schemathesis against a live API (uvicorn on a loopback port, real Postgres, a real token), as
in CI: every operation with generated data (positive and negative), then stateful scenarios that
follow the document's links (submit -> read / trace / cancel / find by key; list approvals ->
grant / deny). Every configured check runs (`deploy/schemathesis.toml`, the file `make
schemathesis` uses): no 5xx, every status, header and body as documented. Bounded: a fixed
number of examples per operation and of stateful scenarios, so the run takes seconds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.conftest import _truncate
from tests.integration.api_env import HarnessApi, harness_api, serve, token

pytestmark = pytest.mark.postgres

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "schemathesis.toml"
EXAMPLES_PER_OPERATION = 25
STATEFUL_SCENARIOS = 15
STATEFUL_STEPS = 6
BOUNDED = {
    "deadline": None,
    "derandomize": True,  # the same examples on every run: a CI failure reproduces locally
    "database": None,
    "phases": [Phase.explicit, Phase.generate],  # no shrinking: the report shows the first case
    "suppress_health_check": list(HealthCheck),
}


@pytest.fixture
def live(
    pg_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, str, Any]]:
    import schemathesis
    from schemathesis.config import SchemathesisConfig

    api: HarnessApi = harness_api(pg_store, tmp_path / "ledger.db")
    tok = token(api.cfg, "st", "schemathesis", roles=("approver",))
    monkeypatch.setenv("SCHEMATHESIS_TOKEN", tok)
    requester = token(api.cfg, "st", "svc")

    def seed() -> None:
        """Something for the approval links to act on: one task waiting for an approval."""
        api.client.post(
            "/v1/tasks",
            json={"workflow": "example@1", "input": {"account": "a1", "amount_minor": 150_000}},
            headers={"Authorization": f"Bearer {requester}", "Idempotency-Key": "seed"},
        )
        api.harness.run_until_idle()

    def reset() -> None:
        """Each stateful scenario starts from the same state. Otherwise what one scenario did
        (a cancel, a decision) changes which links the next can follow, and Hypothesis, seeing
        the same choices lead elsewhere, fails the run as flaky generation."""
        api.harness.publisher.queue.clear()
        _truncate(pg_store)
        seed()

    seed()
    with serve(api.app) as base:
        config = SchemathesisConfig.from_path(str(CONFIG))
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json", config=config)
        yield schema, tok, reset


def test_every_operation_with_generated_data(live: tuple[Any, str, Any]) -> None:
    schema, tok, _ = live
    headers = {"Authorization": f"Bearer {tok}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9  # every route of the document, ops included

    checked = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(max_examples=EXAMPLES_PER_OPERATION, **BOUNDED)  # type: ignore[arg-type]
            @given(case=operation.as_strategy(mode))
            def run(case: Any) -> None:
                case.call_and_validate(headers=headers)

            try:
                run()
            except Unsatisfiable:
                # Nothing of this operation can be made invalid (no parameters, no body).
                assert mode is GenerationMode.NEGATIVE, operation.label
                continue
            checked += 1
    assert checked >= len(operations) + 5  # every operation, most also with invalid data


def test_stateful_scenarios_follow_the_links(live: tuple[Any, str, Any]) -> None:
    schema, tok, reset = live
    headers = {"Authorization": f"Bearer {tok}"}

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            reset()

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers}

    Workflow.run(
        settings=settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            **BOUNDED,  # type: ignore[arg-type]
        )
    )
