"""The example receiver (examples/webhook_receiver) against what agent_jobs really sends: our
signed POST verifies with `standardwebhooks`, an approval becomes one chat line with the amount
and the console link, a repeated `webhook-id` is not posted twice, a forged one is refused."""

from __future__ import annotations

import threading
import time

from agent_jobs.notify import sender, signing
from agent_jobs.notify.urls import UrlPolicy
from agent_jobs.store.webhook_outbox import Event, body_of
from examples.webhook_receiver.receiver import Receiver, serve

APPROVAL = Event(
    "approval.requested",
    {
        "task_id": "tsk_1",
        "approval_id": "apr_1",
        "action": {"tool": "refunds.create", "tool_version": "2", "amount_minor": 250000,
                   "currency": "INR"},
        "policy_reason": "over the auto-approve limit",
        "links": {"console": "/console/#/approvals/apr_1"},
    },
)  # fmt: skip


def test_the_example_receiver_over_http() -> None:
    secret = signing.new_secret()
    lines: list[str] = []
    server = serve(Receiver(secret, lines.append), 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    policy = UrlPolicy.of(["127.0.0.1/32"], allow_http=True)
    try:
        body = body_of(APPROVAL).encode()
        headers = signing.headers("msg_1", int(time.time()), body, [secret])
        assert sender.post(url, headers, body, policy, 5.0).status == 204
        assert sender.post(url, headers, body, policy, 5.0).status == 204  # a retry
        forged = signing.headers("msg_2", int(time.time()), body, [signing.new_secret()])
        assert sender.post(url, forged, body, policy, 5.0).status == 400
    finally:
        server.shutdown()
        server.server_close()
    assert lines == [
        "Approval needed: refunds.create for 2,500.00 INR on task tsk_1: over the auto-approve "
        "limit. Decide: /console/#/approvals/apr_1"
    ]
