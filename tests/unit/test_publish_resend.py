"""A step the broker refused (unreachable: a failover, a restart) is sent again by the process
that failed to send it as soon as the broker answers: after its next successful send, or when
its worker reconnects (`resend_unsent`), not after the dispatch sweeper's grace (60 s)."""

from __future__ import annotations

from typing import Any

import redis

from agent_jobs.queue.app import app
from agent_jobs.queue.publisher import CeleryPublisher
from agent_jobs.store import Dispatch


class _Flaky:
    """A broker that refuses while `down`; records what it received."""

    def __init__(self) -> None:
        self.down = True
        self.sent: list[str] = []


def _publisher(broker: _Flaky) -> CeleryPublisher:
    pub = CeleryPublisher(app, _Directory(), "ajtest")  # type: ignore[arg-type]

    def send_step(task_id: str, queue: str, carried: Any = None) -> None:
        if broker.down:
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
        broker.sent.append(task_id)

    pub._send_step = send_step  # type: ignore[method-assign]
    return pub


class _Directory:
    def touch(self, tenant_id: str) -> bool:
        return False


def test_a_refused_step_goes_out_with_the_next_send() -> None:
    broker = _Flaky()
    pub = _publisher(broker)
    pub.send(Dispatch("tsk_a", "acme"))
    pub.send(Dispatch("tsk_b", "acme"))
    assert broker.sent == []
    broker.down = False
    pub.send(Dispatch("tsk_c", "acme"))
    assert sorted(broker.sent) == ["tsk_a", "tsk_b", "tsk_c"]
    pub.send(Dispatch("tsk_d", "acme"))
    assert broker.sent.count("tsk_a") == 1  # sent again once, not at every send


def test_resend_unsent_sends_them_when_the_broker_is_back_and_keeps_them_while_it_is_not() -> None:
    broker = _Flaky()
    pub = _publisher(broker)
    pub.send(Dispatch("tsk_a", "acme"))
    assert pub.resend_unsent() == 1 and broker.sent == []  # still down: remembered again
    broker.down = False
    assert pub.resend_unsent() == 1 and broker.sent == ["tsk_a"]
    assert pub.resend_unsent() == 0
