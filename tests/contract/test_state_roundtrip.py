"""A task's state comes back exactly as a step wrote it, on both backends: same values, same
types, same key order. Postgres keeps it as `json` text (migration 0012); as `jsonb` it turned
1e16 into an integer and reordered keys, so a state read back differed from the one written."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.core.text import to_json
from agent_jobs.store.guard import Guard

KEYS = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
STATES = st.dictionaries(
    KEYS,
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.sampled_from([1e16, 0.1, -0.0, 1e-7, 2.5e300])
        | KEYS,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
        max_leaves=12,
    ),
    max_size=6,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(state=STATES)
def test_a_state_reads_back_exactly_as_written(store: Any, state: dict[str, Any]) -> None:
    created = store.create_or_get(
        f"t{uuid.uuid4().hex[:10]}",
        f"k-{uuid.uuid4().hex}",
        TaskRequest(workflow="example@1", input={}),
        requester="someone",
    )
    lease = store.claim(created.task.id, "w1", 30)
    assert lease is not None
    store.transition(
        Guard.lease(lease),
        Patch(to=Status.RUNNING, event="started", data={}, state=state),
        returning=False,
    )
    # The plain read, and the claim (what the next step starts from).
    assert to_json(store.get(created.task.id).state) == to_json(state)
    again = store.claim(created.task.id, "w2", 30)
    assert again is not None
    assert to_json(again.task.state) == to_json(state)
