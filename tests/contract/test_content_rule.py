"""Content is data (issue 9, point 2): text from outside — NUL, lone surrogates, control and
bidi characters, NaN — never fails a write. What the store keeps is `clean_json` of what it was
given, on both backends, through every path text takes into it."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.core.text import clean_json, clean_text
from agent_jobs.store.guard import Guard

ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=80)
HOSTILE = st.one_of(
    ANY_TEXT,
    st.sampled_from(["\x00", "a\x00b", "\ud800", "\udfff tail", "\u202eevil", "line\nbreak"]),
)
VALUES = st.recursive(
    # jsonb stores numbers as numeric (1e16 comes back as an integer): floats of fixed shape.
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.sampled_from([0.5, -1.25, float("nan"), float("inf"), float("-inf")])
    | HOSTILE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE, inner, max_size=3),
    max_leaves=10,
)
SLOW = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SLOW
@given(payload=VALUES, note=HOSTILE, requester=HOSTILE)
def test_hostile_text_goes_through_the_store_and_comes_back_cleaned(
    store: Any, payload: Any, note: str, requester: str
) -> None:
    tenant = f"t{uuid.uuid4().hex[:10]}"
    created = store.create_or_get(
        tenant,
        f"k-{uuid.uuid4().hex}",
        TaskRequest(workflow="example@1", input={"note": payload}),
        requester=requester or "someone",
    )
    task = store.get(created.task.id)
    assert task.input == clean_json({"note": payload})
    assert task.requester == clean_text(requester or "someone")

    lease = store.claim(task.id, "w1", 30)
    assert lease is not None
    result = store.transition(
        Guard.lease(lease),
        Patch(
            to=Status.RUNNING,
            event="started",
            data={"why": note, "payload": payload},
            state={"facts": payload, note: note},
            outcome=None,
        ),
    )
    after = store.get(task.id)
    assert after.state == clean_json({"facts": payload, note: note})
    assert result.task.state == after.state
    store.append_event(task.id, "audit", {"text": note, "payload": payload})
    *_, started, audit = store.events(task.id)
    assert started.data["why"] == clean_text(note)
    assert audit.data == clean_json({"text": note, "payload": payload})


@SLOW
@given(payload=VALUES, note=HOSTILE)
def test_hostile_text_in_a_steps_held_events_rides_its_commit_cleaned(
    store: Any, payload: Any, note: str
) -> None:
    """What a step's hooks recorded (a model's words, a tool's answer) is written with the
    step's transition — on Postgres inside the compare-and-set's own statement — cleaned."""
    import time

    from agent_jobs.store import PendingEvent

    tenant = f"t{uuid.uuid4().hex[:10]}"
    created = store.create_or_get(
        tenant,
        f"k-{uuid.uuid4().hex}",
        TaskRequest(workflow="example@1", input={}),
        requester="someone",
    )
    lease = store.claim(created.task.id, "w1", 30)
    assert lease is not None
    held = [
        PendingEvent("chat", {"said": note, "payload": payload}, time.monotonic()),
        PendingEvent("execute_tool orders.get", {"result": payload}, time.monotonic()),
    ]
    store.transition(
        Guard.lease(lease),
        Patch(to=Status.RUNNING, event="started", data={}),
        events=held,
        returning=False,
    )
    *_, chat, tool, started = store.events(created.task.id)
    assert (chat.type, tool.type, started.type) == ("chat", "execute_tool orders.get", "started")
    assert chat.data == clean_json({"said": note, "payload": payload})
    assert tool.data == clean_json({"result": payload})
    assert chat.seq < tool.seq < started.seq
