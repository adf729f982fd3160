"""The observers as one list (obs/observers.py): a step notifies the list once, and each member
that has the hook hears it once, in order; the list is the orchestrator's `Observer` port."""

from __future__ import annotations

import inspect
from decimal import Decimal
from typing import Any

from agent_jobs.obs.metrics import PrometheusObserver
from agent_jobs.obs.observers import HOOKS, Observers
from agent_jobs.obs.otel import TracingObserver
from agent_jobs.orchestrator.ports import NullObserver, Observer

# One call of every hook, with arguments of the port's shape.
CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "transition": (("wf", "a", "b"), {}),
    "step": (("running", 0.5, "ok"), {}),
    "lease_expired": ((2,), {}),
    "reconciled": (("found",), {}),
    "dead_letter": (("wf",), {}),
    "stale_commit": ((), {}),
    "task_created": (("wf", "api"), {}),
    "policy_decision": (("v1", "allow"), {}),
    "model_call": (
        ("r", "ok"),
        {"input_tokens": 3, "output_tokens": 4, "cached_input_tokens": 1, "cost": Decimal("0.1")},
    ),
    "tool_call": (("t", "ok"), {}),
    "unauthorised_action": (("t",), {}),
    "held": (("cap",), {}),
    "task_ended": (("task-1",), {}),
}


class Recording:
    """Every hook, recorded into a shared log under this member's name."""

    def __init__(self, name: str, log: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]):
        self.name, self.log = name, log

    def __getattr__(self, hook: str) -> Any:
        if hook not in HOOKS:
            raise AttributeError(hook)
        return lambda *a, **k: self.log.append((self.name, hook, a, k))


class EndsOnly:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def task_ended(self, task_id: str) -> None:
        self.log.append(("ends", "task_ended", (task_id,), {}))


def _port_hooks() -> set[str]:
    return {n for n, v in vars(Observer).items() if not n.startswith("_") and callable(v)}


def test_the_hook_list_is_the_ports() -> None:
    assert set(HOOKS) == _port_hooks()
    assert len(HOOKS) == len(set(HOOKS))
    for name in HOOKS:
        # Same parameters as the port: the list is an Observer.
        port = inspect.signature(getattr(Observer, name))
        ours = inspect.signature(getattr(Observers, name))
        assert list(port.parameters.values()) == list(ours.parameters.values()), name


def test_each_member_hears_each_hook_once_in_order() -> None:
    log: list[Any] = []
    first, second = Recording("first", log), Recording("second", log)
    # A list inside the list is flattened: `first` is not notified twice.
    observers = Observers(Observers(first, EndsOnly(log)), second)
    for name in HOOKS:
        args, kwargs = CALLS[name]
        log.clear()
        getattr(observers, name)(*args, **kwargs)
        expected = [("first", name, args, kwargs)]
        if name == "task_ended":
            expected.append(("ends", name, args, kwargs))
        expected.append(("second", name, args, kwargs))
        assert log == expected, name


def test_tracing_is_a_member_of_the_list_not_a_wrapper() -> None:
    log: list[Any] = []
    inner = Recording("metrics", log)
    ends = EndsOnly(log)
    observer = TracingObserver(inner, ends)  # type: ignore[arg-type]
    assert observer.members == (inner, ends)
    observer.task_ended("t1")
    observer.step("running", 0.1, "ok")
    assert [(who, hook) for who, hook, *_ in log] == [
        ("metrics", "task_ended"),
        ("ends", "task_ended"),
        ("metrics", "step"),
    ]


def test_real_observers_fit_the_list() -> None:
    observers = Observers(PrometheusObserver(), NullObserver())
    for name in HOOKS:
        args, kwargs = CALLS[name]
        getattr(observers, name)(*args, **kwargs)
    assert all(len(observers._hooks[name]) == 2 for name in HOOKS)
