"""A publish that fails because the broker does not answer is one warning line (the dispatch is
recorded and the sweeper repeats it): `agent-jobs submit` with Redis down printed a forty-line
redis traceback under its task id. Any other failure, a bug, keeps its traceback."""

from __future__ import annotations

import logging

import pytest
import redis
from kombu.exceptions import OperationalError

from agent_jobs.queue.app import app
from agent_jobs.queue.publisher import CeleryPublisher
from agent_jobs.store import Dispatch


class _Directory:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def touch(self, tenant_id: str) -> bool:
        raise self.exc


@pytest.mark.parametrize(
    "exc",
    [
        redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
        redis.TimeoutError("Timeout connecting to server"),
        OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
        ConnectionRefusedError(111, "Connection refused"),
    ],
)
def test_an_unreachable_broker_is_one_warning(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    pub = CeleryPublisher(app, _Directory(exc), "ajtest")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agent_jobs.queue.publisher"):
        pub.send(Dispatch("tsk_1", "acme"))
    [rec] = caplog.records
    assert rec.levelno == logging.WARNING and rec.exc_info is None
    text = rec.getMessage()
    assert "tsk_1" in text and "the sweeper will retry" in text
    assert "onnection refused" in text or "Timeout" in text  # says why, on the line


def test_another_failure_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    pub = CeleryPublisher(app, _Directory(ValueError("a bug")), "ajtest")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agent_jobs.queue.publisher"):
        pub.send(Dispatch("tsk_2", "acme"))
    [rec] = caplog.records
    assert rec.levelno == logging.ERROR and rec.exc_info is not None
