"""The operator switches' reader, which re-reads every few seconds, says once that it cannot
read them (one line, no statement or value) and once that it can again: not a multi-line
warning at every read while the database is down."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from agent_jobs.ops.live import StoreSwitches


class FlakySource:
    def __init__(self) -> None:
        self.down = False

    def switches(self) -> list[Any]:
        if self.down:
            orig = Exception("server closed the connection unexpectedly\n\tThis probably means")
            raise OperationalError("SELECT * FROM ops_switches", {"k": "s3cr3t"}, orig)
        return []


def test_a_read_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    source = FlakySource()
    switches = StoreSwitches(source)
    caplog.set_level(logging.INFO, logger="agent_jobs.ops.live")
    switches.reload()
    source.down = True
    for _ in range(5):
        switches.reload()
    source.down = False
    switches.reload()
    switches.reload()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "cannot read the operator switches (server closed the connection unexpectedly); "
        "keeping the last set",
        "the operator switches are readable again",
    ]
