"""`agent-jobs sim serve` with no arguments serves the README's world (order 8472 charged twice)
and says so; `--world empty` serves no orders. Run as real processes, as a person would."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
PREFIX = "sim listening on "


@contextmanager
def serving(*argv: str) -> Iterator[tuple[str, str]]:
    """(base URL, the world line) of a sim process started with `argv`."""
    proc = subprocess.Popen(
        [sys.executable, *argv, "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        listening = proc.stdout.readline().strip()
        world = proc.stdout.readline().strip()
        assert listening.startswith(PREFIX), listening
        yield listening.removeprefix(PREFIX), world
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [("-m", "agent_jobs.cli", "sim", "serve"), ("-m", "agent_jobs.sim", "serve")],
    ids=["agent-jobs", "python-m"],
)
def test_serve_defaults_to_the_incident_world_and_says_so(argv: tuple[str, ...]) -> None:
    with serving(*argv) as (url, world):
        assert world.startswith("sim world: incident_8472 (the default"), world
        assert "orders 8472; 2 payments, 0 refunds" in world
        order = requests.get(url + "/orders/8472", timeout=5).json()
        assert order["payment_ids"] == ["pay_8472_a", "pay_8472_b"]


@pytest.mark.slow
def test_an_empty_world_is_asked_for_by_name(tmp_path: Path) -> None:
    with serving("-m", "agent_jobs.cli", "sim", "serve", "--world", "empty") as (url, world):
        assert world == "sim world: empty: no orders; 0 payments, 0 refunds, 3 policy versions"
        assert requests.get(url + "/orders/8472", timeout=5).status_code == 404
    state = tmp_path / "sim.json"
    with serving("-m", "agent_jobs.sim", "serve", "--state", str(state)):
        pass
    # A state file that exists wins over the default world, and the line says where it came from.
    with serving("-m", "agent_jobs.sim", "serve", "--state", str(state), "--world", "empty") as (
        url,
        world,
    ):
        assert world.startswith("sim world: from the state file"), world
        assert "orders 8472" in world
