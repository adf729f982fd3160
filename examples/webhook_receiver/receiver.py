"""A webhook receiver for agent_jobs, in a few lines: verify, de-duplicate, post to chat.

It verifies each message with the `standardwebhooks` library (the secret agent_jobs showed once
when the endpoint was registered), answers 2xx only once the message is handled, skips a
`webhook-id` it has handled before (a retry or a replay repeats it), and turns an
`approval.requested` into a chat line an approver can act on. The chat post is a function
you replace (`post_to_chat`); here it prints.

    WEBHOOK_SECRET=whsec_... CONSOLE_BASE_URL=https://jobs.example.com \
        python -m examples.webhook_receiver --port 8088

(`CONSOLE_BASE_URL`: your API's address, put before the console links, which are paths.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

MAX_BODY = 64 * 1024


def chat_line(event: dict[str, Any], console_base: str = "") -> str | None:
    """What a team's chat shows for an event (None: nothing worth a line)."""
    data = event.get("data") or {}
    kind = event.get("type")
    if kind in ("approval.requested", "approval.expiring"):
        action = data.get("action") or {}
        amount = ""
        if "amount_minor" in action:
            amount = f" for {action['amount_minor'] / 100:,.2f} {action.get('currency', '')}"
        soon = " (expires soon)" if kind == "approval.expiring" else ""
        link = console_base + str((data.get("links") or {}).get("console", ""))
        return (
            f"Approval needed{soon}: {action.get('tool')}{amount.rstrip()} on task "
            f"{data.get('task_id')}: {data.get('policy_reason')}. Decide: {link}"
        )
    if kind and kind.startswith("task."):
        return f"Task {data.get('task_id')} ({data.get('workflow')}): {kind.removeprefix('task.')}"
    return None


class Receiver:
    """Verify, de-duplicate by `webhook-id`, hand the event on. Keep `seen` in a database for a
    receiver that restarts (a set here)."""

    def __init__(self, secret: str, post_to_chat: Callable[[str], None] = print) -> None:
        self.webhook = Webhook(secret)
        self.post_to_chat = post_to_chat
        self.seen: set[str] = set()

    def handle(self, body: bytes, headers: dict[str, str]) -> int:
        """The HTTP status to answer: 204 handled (or seen before), 400 not ours."""
        try:
            event = self.webhook.verify(body, headers)
        except WebhookVerificationError:
            return 400  # not signed with our secret, or too old: never acted on
        msg_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
        if msg_id in self.seen:
            return 204  # a retry or a replay of what we handled: the same id
        line = chat_line(event, os.environ.get("CONSOLE_BASE_URL", ""))
        if line is not None:
            self.post_to_chat(line)
        self.seen.add(msg_id)
        return 204


def serve(receiver: Receiver, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            status = (
                413
                if size > MAX_BODY
                else receiver.handle(self.rfile.read(size), dict(self.headers.items()))
            )
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main() -> None:
    import argparse  # noqa: PLC0415

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8088)
    args = p.parse_args()
    server = serve(
        Receiver(os.environ["WEBHOOK_SECRET"], lambda line: print(line, flush=True)), args.port
    )
    print(json.dumps({"listening": f"http://127.0.0.1:{args.port}/"}), flush=True)
    server.serve_forever()
