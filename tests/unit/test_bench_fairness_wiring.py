"""`bench fairness` passes its options to the benchmark: `--no-shared` skips the one-shared-queue
baseline (it was parsed and dropped, so the baseline always ran)."""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.bench import fairness
from agent_jobs.cli import bench, build_parser


@pytest.mark.parametrize(("flags", "shared"), [([], True), (["--no-shared"], False)])
def test_fairness_gets_its_options(
    flags: list[str], shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []

    def run(**kwargs: Any) -> dict[str, Any]:
        seen.append(kwargs)
        return {}

    monkeypatch.setattr(fairness, "run", run)
    args = build_parser().parse_args(
        ["bench", "fairness", "--backlog", "40", "--step-ms", "2.5", "--json", *flags]
    )
    assert bench.cmd_fairness(args) == 0
    assert seen == [
        {"tenants": 20, "backlog": 40, "step_ms": 2.5, "workers": 2, "rounds": 5,
         "shared": shared, "progress": False}
    ]  # fmt: skip
