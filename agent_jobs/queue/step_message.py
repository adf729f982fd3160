"""A step message as the broker stores it, built directly: Celery's task protocol 2 in kombu's
envelope for its virtual (Redis) transport.

Every step publishes the next one, and Celery's and kombu's publishing code
(`send_task_message`: the queue lookup, the retry policy, the two publish signals;
`Producer.publish`: serialization, `prepare_message`, `ensure`) cost a step about as much CPU
as the broker's own round trip. For the one message the hot path sends, none of that varies:
`message` builds the same dict `Producer.publish` hands to the channel's `_put`, and the
publisher passes it there (see `CeleryPublisher._send_step`, which says when it may).
`tests/contract/test_step_message.py` holds it equal, field by field, to what Celery builds.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kombu.utils.uuid import uuid

from agent_jobs.core.names import ENQUEUED_AT_HEADER, STEP_TASK

# Celery's `embed` part of the body: no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def message(
    task_id: str,
    carried: dict[str, Any] | None,
    queue: str,
    *,
    origin: str,
    enqueued_at: float,
) -> dict[str, Any]:
    """The envelope of one `agent_jobs.step(task_id[, carried])` message for `queue`."""
    args = (task_id,) if carried is None else (task_id, carried)
    body = json.dumps([args, {}, _EMBED]).encode()
    message_id = uuid()
    return {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": STEP_TASK,
            "id": message_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": message_id,
            "parent_id": None,
            # Only the task id: a carried row, kilobytes, is not repeated in a header.
            "argsrepr": repr((task_id,)),
            "kwargsrepr": "{}",
            "origin": origin,
            "ignore_result": True,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
            ENQUEUED_AT_HEADER: enqueued_at,
        },
        "properties": {
            "correlation_id": message_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": uuid(),
        },
    }
