"""The CLI checks every identifier with the API's rules (`core.identity`, full match) before it
touches a runtime: a trailing newline, a NUL or a bidi override is one line on stderr and exit
status 2, never a traceback and never a row."""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.cli import main

SUBMIT = ["submit", "--workflow", "noop@1"]


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        ([*SUBMIT, "--tenant", "acme\n", "--key", "k"], "--tenant"),
        ([*SUBMIT, "--tenant", "acme", "--key", "k\n"], "--key"),
        ([*SUBMIT, "--tenant", "acme", "--key", "k", "--requester", "a\x00b"], "--requester"),
        ([*SUBMIT, "--tenant", "acme", "--key", "k", "--requester", " "], "--requester"),
        (["approve", "apr_1", "--as", "bob\u202e"], "--as"),
        (["deny", "apr_1", "--as", "bob", "--note", "x\x00"], "--note"),
        (["status", "tsk_1\n"], "task id"),
        (["events", "tsk_1", "--tenant", "Acme"], "--tenant"),
        (["cancel", "tsk_1", "--tenant", "acme\n"], "--tenant"),
        (["approvals", "--tenant", "acme\n"], "--tenant"),
        (["dead-letters", "--tenant=-acme"], "--tenant"),
        (["approve", "apr_1\n", "--as", "bob"], "id"),
    ],
)
def test_bad_identifiers_are_one_line_and_exit_2(
    argv: list[str], what: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    from agent_jobs.cli import tasks

    def no_runtime() -> Any:
        raise AssertionError("a bad identifier reached the runtime")

    monkeypatch.setattr(tasks, "_runtime", no_runtime)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"agent-jobs: error: {what}:"), err
