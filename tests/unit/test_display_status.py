"""Issue 22, item 1: `DisplayStatus` is the one list of what a person reads. `display_status` is
total over its whole input space (any status, any flags, any `held_for` a row can hold), every
value it gives is one the API's response models accept, every listed value is reachable, and the
hold reasons the gate, the model cap and `Deferred` write are the ones it reads."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from agent_jobs.api.console_api import TaskList
from agent_jobs.api.models import CancelAccepted, Task
from agent_jobs.core.contracts import TaskView
from agent_jobs.core.errors import Deferred
from agent_jobs.core.holds import HoldReason
from agent_jobs.core.states import TERMINAL, DisplayStatus, Status, display_status
from agent_jobs.gateway import ModelCapSaturated
from agent_jobs.queue.gate import GATE_HOLD, MODEL_CAP, PAUSE_HOLD

AT = datetime(2026, 1, 1, tzinfo=UTC)

# What a task row's `held_for` (a 16-character column) may hold: the known reasons, nothing,
# and anything else, hostile text included (a newer release's reason, a workflow's own).
held_for = st.one_of(
    st.none(),
    st.sampled_from([r.value for r in HoldReason]),
    st.text(max_size=16),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=16),
)


def _view(reading: DisplayStatus, status: Status) -> TaskView:
    return TaskView(
        task_id="tsk_1", tenant_id="acme", status=status, display_status=reading,
        workflow="noop@1", version=1, attempts=0, cancel_requested=False, trace_id="0" * 32,
        created_at=AT, updated_at=AT,
    )  # fmt: skip


@given(st.sampled_from(Status), st.booleans(), held_for, st.booleans())
def test_every_input_reads_as_a_value_every_response_model_accepts(
    status: Status, cancel: bool, held: str | None, stopped: bool
) -> None:
    reading = display_status(status, cancel, held_for=held, stopped_by_operator=stopped)
    assert isinstance(reading, DisplayStatus)
    # The API's types, as the server validates a response and the client reads one.
    task = Task.from_view(_view(reading, status))
    wire = task.model_dump(mode="json")
    assert wire["display_status"] == reading.value
    assert Task.model_validate(wire).display_status is reading
    TaskList(tasks=[task])
    CancelAccepted(task_id="tsk_1", status=status, display_status=reading, cancel_requested=cancel)
    assert TypeAdapter(list[Task]).validate_python([wire])[0].display_status is reading


@given(st.sampled_from(Status), st.booleans(), held_for, st.booleans())
def test_what_is_read_follows_the_rules(
    status: Status, cancel: bool, held: str | None, stopped: bool
) -> None:
    reading = display_status(status, cancel, held_for=held, stopped_by_operator=stopped)
    if status in TERMINAL:
        assert reading.value == status.value.lower()  # a finished task is never held
    elif cancel:
        assert reading is DisplayStatus.CANCEL_REQUESTED
    elif held == HoldReason.PAUSED.value:
        assert reading is DisplayStatus.PAUSED
    elif held in {r.value for r in HoldReason}:
        assert reading.value == f"held_{held}"
    elif held:
        assert reading is DisplayStatus.HELD  # an unknown reason is still held
    elif status is Status.RETRY_WAIT and stopped:
        assert reading is DisplayStatus.STOPPED_BY_OPERATOR


def test_every_listed_value_is_reachable() -> None:
    """The list is exactly what `display_status` says: no value the API documents is dead."""
    held_values = [None, *(r.value for r in HoldReason), "from_a_newer_release"]
    seen = {
        display_status(s, c, held_for=h, stopped_by_operator=o)
        for s, c, h, o in itertools.product(Status, (False, True), held_values, (False, True))
    }
    assert seen == set(DisplayStatus)


def test_the_hold_reasons_written_are_the_ones_read() -> None:
    written = {GATE_HOLD, PAUSE_HOLD, MODEL_CAP, Deferred.hold_for, ModelCapSaturated.hold_for}
    assert written == {r.value for r in HoldReason}
    assert all(len(r.value) <= 16 for r in HoldReason)  # the `held_for` column's width


def test_the_api_schema_lists_exactly_the_core_values() -> None:
    schema = Task.model_json_schema()
    ref = schema["properties"]["display_status"]
    name = (ref.get("$ref") or ref["allOf"][0]["$ref"]).rsplit("/", 1)[-1]
    assert set(schema["$defs"][name]["enum"]) == {d.value for d in DisplayStatus}
