"""The `agent-jobs` command as a user runs it: a separate process, embedded defaults, no
services. Bad input is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_jobs.cli import build_parser
from agent_jobs.store import Store
from tests.support.live import wait_until

pytestmark = pytest.mark.slow


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env.update({
        "AGENT_JOBS_DATABASE_URL": f"sqlite:///{tmp / 'aj.db'}",
        "AGENT_JOBS_EXAMPLE_BACKEND": str(tmp / "ledger.db"),
        "AGENT_JOBS_SWEEP_INTERVAL_S": "0.3",
        "AGENT_JOBS_DISPATCH_GRACE_S": "0.5",
    })  # fmt: skip
    return env


def cli(tmp: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", *args],
        env=_env(tmp), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database `agent-jobs db upgrade` made, once for the module; tests copy it."""
    tmp = tmp_path_factory.mktemp("upgraded")
    cli(tmp, "db", "upgrade")
    return tmp / "aj.db"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["submit", "--tenant", "Bad Tenant", "--key", "k", "--workflow", "example@1"], "--tenant"),
        (
            [
                "submit",
                "--tenant",
                "t1",
                "--key",
                "k",
                "--workflow",
                "example@1",
                "--input",
                "{oops",
            ],
            "not valid JSON",
        ),
        (
            ["submit", "--tenant", "t1", "--key", "k", "--workflow", "example@1", "--input", "[1]"],
            "JSON object",
        ),
        (["submit", "--tenant", "t1", "--key", "k", "--workflow", "nope@1"], "unknown workflow"),
        (["submit", "--tenant", "t1", "--key", "k", "--workflow", "no-version"], "name@version"),
        (["status", "tsk_missing"], "not found"),
        (["approve", "apr_missing", "--as", "boss"], "not found"),
        (["sweep", "everything"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    tmp_path: Path, upgraded: Path, args: list[str], needle: str
) -> None:
    shutil.copy(upgraded, tmp_path / "aj.db")
    proc = cli(tmp_path, *args, ok=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("agent-jobs: error:"), proc.stderr
    assert needle in proc.stderr


def test_every_command_has_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = cli(tmp_path, "--help").stdout  # in a process of its own, as a user runs it
    parser = build_parser()  # each command's help from the same parser, in this process
    for command in (
        "submit",
        "status",
        "events",
        "cancel",
        "approvals",
        "approve",
        "deny",
        "sweep",
        "db",
        "run",
        "demo",
        "bench",
        "dead-letters",
    ):
        assert command in top
        with pytest.raises(SystemExit) as done:
            parser.parse_args([command, "--help"])
        assert done.value.code == 0
        assert capsys.readouterr().out.startswith("usage:"), command


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """`agent-jobs run`: the embedded worker and beat, as a user starts them."""
    cli(tmp_path, "db", "upgrade")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_jobs.cli", "run", "--concurrency", "2"],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while "ready" not in proc.stdout.readline():
        assert time.monotonic() < deadline and proc.poll() is None, "agent-jobs run did not start"
    yield proc
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def _status(tmp: Path, task_id: str) -> dict[str, object]:
    return dict(json.loads(cli(tmp, "status", task_id, "--json").stdout))


def _wait_status(tmp: Path, task_id: str, status: str, timeout_s: float = 60) -> dict[str, object]:
    """Wait by reading the database in this process (a `status` process a poll would cost about a
    second each), then read the task as a user does, with `agent-jobs status`."""
    store = Store.from_url(_env(tmp)["AGENT_JOBS_DATABASE_URL"])
    try:
        wait_until(
            f"{task_id} to reach {status}",
            lambda: store.get(task_id).status == status,
            timeout_s,
            every_s=0.1,
        )
    finally:
        store.dispose()
    view = _status(tmp, task_id)
    assert view["status"] == status, view
    return view


def _submit_payout(tmp: Path, key: str, payout: str) -> str:
    """`agent-jobs submit` of an example payout for tenant acme, requested by alice; its id."""
    args = ["--tenant", "acme", "--key", key, "--workflow", "example@1", "--input", payout]
    return cli(tmp, "submit", *args, "--requester", "alice").stdout.strip()


def test_submit_approve_deny_and_cancel_from_the_command_line(
    tmp_path: Path, runner: subprocess.Popen[str]
) -> None:
    payout = json.dumps({"account": "acc_1", "amount_minor": 250000, "reads": 0})
    first = _submit_payout(tmp_path, "req-1", payout)
    again = _submit_payout(tmp_path, "req-1", payout)
    assert first == again and first.startswith("tsk_")
    view = _wait_status(tmp_path, first, "APPROVAL_WAIT")
    assert view["display_status"] == "awaiting_approval"
    listed = json.loads(cli(tmp_path, "approvals", "--tenant", "acme", "--json").stdout)
    assert [a["task_id"] for a in listed] == [first]
    assert listed[0]["args"]["amount_minor"] == 250000  # the approver sees the exact action
    refused = cli(tmp_path, "approve", first, "--as", "alice", ok=False)
    assert refused.returncode != 0 and "requester" in refused.stderr
    cli(tmp_path, "approve", first, "--as", "lead-41")
    done = _wait_status(tmp_path, first, "COMPLETED")
    assert done["outcome"]["verified"] is True  # type: ignore[index]

    denied = _submit_payout(tmp_path, "req-2", payout)
    _wait_status(tmp_path, denied, "APPROVAL_WAIT")
    cli(tmp_path, "deny", denied, "--as", "lead-41")
    _wait_status(tmp_path, denied, "FAILED")

    parked = _submit_payout(tmp_path, "req-3", payout)
    _wait_status(tmp_path, parked, "APPROVAL_WAIT")
    cli(tmp_path, "cancel", parked)
    _wait_status(tmp_path, parked, "CANCELLED")
    events = cli(tmp_path, "events", parked).stdout
    assert "cancel_requested" in events and "cancelled" in events


def test_the_example_demo_runs_the_incident_with_every_effect_once(tmp_path: Path) -> None:
    proc = cli(tmp_path, "demo", "example")
    assert "every effect executed exactly once" in proc.stdout
    for moment in ("EXEC_UNKNOWN", "SIGKILL", "lease_expired", "reconciled_found", "COMPLETED"):
        assert moment in proc.stdout
