"""Readiness probes log a change of state, not every probe: a dependency found unreachable is
logged once (one line, no statement or value in it), and once more when it answers again."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from agent_jobs.api.ops import _probe


def _down() -> None:
    orig = Exception('connection to server at "db", port 5432 failed: Connection refused\nIs it?')
    raise OperationalError("SELECT 1", {"secret": "s3cr3t"}, orig)


def _up() -> None:
    return None


def test_a_dependency_is_logged_when_it_goes_down_and_when_it_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    st: Any = SimpleNamespace(down=set())
    caplog.set_level(logging.INFO, logger="agent_jobs.api.ops")
    states = [_probe(st, "database", p) for p in (_up, _down, _down, _down, _up, _up, _down)]
    assert states == ["ok", "unavailable", "unavailable", "unavailable", "ok", "ok", "unavailable"]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        'readiness: database unreachable: connection to server at "db", port 5432 failed: '
        "Connection refused",
        "readiness: database answers again",
        'readiness: database unreachable: connection to server at "db", port 5432 failed: '
        "Connection refused",
    ]
    assert not any("s3cr3t" in line or "SELECT" in line for line in lines)


def test_a_dependency_reported_down_at_start_is_not_reported_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    st: Any = SimpleNamespace(down={"database"})  # as create_app leaves it: said at start
    caplog.set_level(logging.INFO, logger="agent_jobs.api.ops")
    assert _probe(st, "database", _down) == "unavailable"
    assert caplog.records == []
