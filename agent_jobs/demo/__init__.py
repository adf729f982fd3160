"""`agent-jobs demo`: the incidents of seed 004, end to end, on the embedded default."""

from __future__ import annotations


def run_demo(scenario: str, *, quiet: bool = False) -> int:
    if scenario == "example":
        from agent_jobs.demo.example import run  # noqa: PLC0415

        return run(quiet=quiet)
    from agent_jobs.demo.refund import run as run_refund  # noqa: PLC0415

    return run_refund(quiet=quiet)
