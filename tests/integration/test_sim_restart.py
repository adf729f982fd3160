"""A sim started with a state file keeps its ledger across restarts, in-process and as a process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer

KEY = "refund:req-8472:pay_8472_b"
BODY = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
REPO = Path(__file__).resolve().parents[2]


def post_refund(base_url: str, key: str = KEY) -> requests.Response:
    return requests.post(
        base_url + "/refunds", json=BODY, headers={"Idempotency-Key": key}, timeout=5
    )


def test_refunds_and_keys_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "sim.json"
    with SimServer(worlds.incident_8472(), state_file=state) as sim:
        created = post_refund(sim.base_url).json()
    with SimServer(state_file=state) as sim:
        assert sim.admin.refunds()[0]["refund_id"] == created["refund_id"] == "rf_3301"
        replay = post_refund(sim.base_url)
        assert replay.status_code == 200 and replay.json() == created
        assert post_refund(sim.base_url, key="another").json()["error"]["code"] == (
            "already_refunded"
        )
        a = {**BODY, "payment_id": "pay_8472_a"}
        r = requests.post(sim.base_url + "/refunds", json=a, headers={"Idempotency-Key": "x"})
        assert r.json()["refund_id"] == "rf_3302"  # the id sequence carried over too


def test_an_existing_state_file_wins_over_a_seed_world(tmp_path: Path) -> None:
    state = tmp_path / "sim.json"
    with SimServer(worlds.incident_8472(), state_file=state) as sim:
        post_refund(sim.base_url)
    with SimServer(worlds.incident_8472(), state_file=state) as sim:
        assert len(sim.admin.refunds()) == 1


def test_a_seeded_world_is_on_disk_before_any_request(tmp_path: Path) -> None:
    state = tmp_path / "sim.json"
    with SimServer(worlds.single_capture(), state_file=state):
        pass
    with SimServer(state_file=state) as sim:
        assert requests.get(sim.base_url + "/orders/9105", timeout=5).status_code == 200


def test_admin_loads_and_resets_are_persisted(tmp_path: Path) -> None:
    state = tmp_path / "sim.json"
    with SimServer(state_file=state) as sim:
        sim.admin.load(worlds.auth_hold_lookalike())
    with SimServer(state_file=state) as sim:
        assert [o["order_id"] for o in sim.admin.dump()["orders"]] == ["9101"]
        sim.admin.reset()
    with SimServer(state_file=state) as sim:
        assert sim.admin.dump()["orders"] == []


def _start(state: Path) -> tuple[subprocess.Popen[str], str]:
    args = ["serve", "--port", "0", "--state", str(state), "--world", "incident_8472"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_jobs.sim", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    prefix = "sim listening on "
    assert line.startswith(prefix), line
    return proc, line.removeprefix(prefix)


@pytest.mark.slow
def test_the_process_prints_its_url_stops_on_sigterm_and_restarts_with_its_ledger(
    tmp_path: Path,
) -> None:
    state = tmp_path / "sim.json"
    proc, url = _start(state)
    try:
        assert post_refund(url).status_code == 201
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    saved = json.loads(state.read_text())
    assert [r["refund_id"] for r in saved["refunds"]] == ["rf_3301"]
    proc, url = _start(state)
    try:
        assert post_refund(url).status_code == 200  # replayed from the ledger on disk
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
