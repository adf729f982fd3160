"""Loading workflows of a user's own into a registry: what a module may do, and every way it can
fail, each as one line naming the setting (or entry point) and the module. In this process, on
registries of the test's own; the process-wide loading runs in subprocesses
(tests/acceptance/test_user_workflows.py)."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.config import from_environ
from agent_jobs.core.errors import ConfigError
from agent_jobs.orchestrator.registry import InvalidWorkflow, WorkflowConflict, WorkflowRegistry
from agent_jobs.workflows import builtin_registry, default_registry, register
from agent_jobs.workflows.loading import (
    ENTRY_POINT_GROUP,
    SETTING,
    WorkflowLoadError,
    load_workflows,
)
from tests.support.user_workflows.greeting import Greeting

PKG = "tests.support.user_workflows"


def _one_line_error(modules: list[str], *points: EntryPoint) -> str:
    with pytest.raises(WorkflowLoadError) as caught:
        load_workflows(builtin_registry(), modules, points)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_the_accessor_returns_one_registry_per_process() -> None:
    first = default_registry()
    assert default_registry() is first
    assert {"example@1", "noop@1", "refund_resolution@3"} <= set(first.names())


def test_register_adds_to_the_one_registry() -> None:
    workflow = Greeting("registered-in-test", 1)
    register(workflow)
    assert default_registry().get("registered-in-test@1") is workflow
    register(workflow)  # the same object again: a no-op
    with pytest.raises(WorkflowConflict):
        register(Greeting("registered-in-test", 1))


def test_changed_settings_give_new_built_ins_and_keep_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The built-ins build their clients from the settings when first used: a runtime built
    after the process changed its settings (evals, demos, tests) must not get clients built
    before. Everything else is carried over, and the new settings' modules loaded."""
    before = default_registry()
    mine = Greeting("carried-over", 1)
    register(mine)
    monkeypatch.setenv("AGENT_JOBS_CONFIRM_LAG_S", "7")
    monkeypatch.setenv(SETTING, f"{PKG}.hello")
    after = default_registry()
    assert after is not before and default_registry() is after
    assert after.get("refund_resolution@3") is not before.get("refund_resolution@3")
    assert after.get("carried-over@1") is mine
    assert "hello@2" in after and "hello@2" not in before


def test_a_module_listing_its_workflows_is_loaded_with_its_origin() -> None:
    registry = builtin_registry()
    origins = load_workflows(registry, [f"{PKG}.hello"])
    assert registry.get("hello@2").name == "hello"
    assert str(origins["hello@2"]) == f"module {PKG}.hello ({SETTING})"
    # Idempotent: loading it again registers nothing new and reports the same origin.
    assert load_workflows(registry, [f"{PKG}.hello"]) == origins
    assert registry.names() == ["example@1", "hello@2", "noop@1", "refund_resolution@3"]


def test_a_module_that_does_not_import_is_one_line_with_its_exception() -> None:
    message = _one_line_error([f"{PKG}.hello", f"{PKG}.broken"])
    assert message == (
        f"{SETTING}: module '{PKG}.broken' did not import: "
        "RuntimeError: the greeting service is misconfigured"
    )


def test_a_module_that_is_not_there_says_so() -> None:
    message = _one_line_error([f"{PKG}.absent"])
    assert message.startswith(f"{SETTING}: module '{PKG}.absent' was not found")


def test_a_module_that_registers_nothing_is_refused() -> None:
    message = _one_line_error([f"{PKG}.empty"])
    assert message.startswith(f"{SETTING}: module '{PKG}.empty' registers no workflow")


def test_a_conflicting_name_and_version_is_refused() -> None:
    message = _one_line_error([f"{PKG}.conflicting"])
    assert message.startswith(f"{SETTING}: module '{PKG}.conflicting'")
    assert "noop@1 is already registered" in message


def test_an_entry_point_naming_an_object_is_loaded() -> None:
    registry = builtin_registry()
    point = EntryPoint("hi", f"{PKG}.hello:workflows", ENTRY_POINT_GROUP)
    origins = load_workflows(registry, [], [point])
    assert str(origins["hello@2"]) == f"entry point hi = {PKG}.hello:workflows"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (f"{PKG}.greeting:Greeting", "is not a workflow instance, not the class"),
        (f"{PKG}.empty:GREETING", "is not a workflow instance"),
        (f"{PKG}.broken", "did not import: RuntimeError"),
        (f"{PKG}.nowhere:x", "was not found"),
    ],
)
def test_a_bad_entry_point_is_one_line_naming_it(value: str, says: str) -> None:
    message = _one_line_error([], EntryPoint("bad", value, ENTRY_POINT_GROUP))
    assert message.startswith(f"entry point 'bad' = {value!r} (group {ENTRY_POINT_GROUP}")
    assert says in message


@pytest.mark.parametrize(
    ("name", "version"), [("Hello", 1), ("he llo", 1), ("", 1), ("hello", True), ("x", "1")]
)
def test_a_workflow_no_request_could_name_is_refused(name: str, version: object) -> None:
    with pytest.raises(InvalidWorkflow):
        WorkflowRegistry().register(Greeting(name, version))  # type: ignore[arg-type]


@given(st.text(max_size=300))
def test_the_setting_is_module_names_or_one_line_naming_it(raw: str) -> None:
    try:
        cfg = from_environ({SETTING: raw})
    except ConfigError as exc:
        assert str(exc).startswith(f"{SETTING}=")
        assert "\n" not in str(exc)
        return
    for module in cfg.workflows:
        assert all(part.isidentifier() for part in module.split("."))
    assert len(set(cfg.workflows)) == len(cfg.workflows)


def test_the_setting_splits_on_commas_and_drops_repeats() -> None:
    cfg = from_environ({SETTING: f" {PKG}.hello, ,{PKG}.registered,{PKG}.hello "})
    assert cfg.workflows == (f"{PKG}.hello", f"{PKG}.registered")
    with pytest.raises(ConfigError, match="is not a module name"):
        from_environ({SETTING: "mypkg/workflows.py"})
