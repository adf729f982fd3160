"""Celery's settings are derived from the settings schema when the app is first configured, not
snapshotted at import: `celery_settings(cfg)` is a pure function of one `Settings`, and the app
reads the process's settings when Celery first needs its configuration. The app's own checks run
in a fresh interpreter: in this one the app is already configured, from the session's settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.config import Settings, from_environ
from agent_jobs.orchestrator.sweep_kinds import periods
from agent_jobs.queue.celery_config import app_settings, celery_settings, override_settings

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, env: dict[str, str], cwd: Path = ROOT) -> Any:
    """Run `code` in a fresh interpreter with only `env` for AGENT_JOBS_*/CELERY_* variables;
    its last line of output is JSON."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_JOBS_", "CELERY_"))}
    path = os.pathsep.join(p for p in (str(ROOT), env.pop("PYTHONPATH", "")) if p)
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env={**base, **env, "PYTHONPATH": path},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# What the app's configuration says, read after the environment was changed post-import.
_REPORT = textwrap.dedent(
    """
    conf = app.conf
    print(json.dumps({
        "control_exchange": conf.control_exchange,
        "event_exchange": conf.event_exchange,
        "task_default_queue": conf.task_default_queue,
        "queues": sorted(q.name for q in conf.task_queues),
        "routes": conf.task_routes,
        "broker_url": conf.broker_url,
        "polling_interval": conf.broker_transport_options["polling_interval"],
        "task_events": conf.worker_send_task_events,
        "prefetch": conf.worker_prefetch_multiplier,
        "sweep_lease": conf.beat_schedule["sweep-lease"]["schedule"],
        "private_or_upper": [k for k in ("_hidden", "Upper") if k in conf],
    }))
    """
)


def test_the_app_uses_the_settings_in_effect_when_it_is_configured_not_at_import() -> None:
    code = (
        textwrap.dedent(
            """
        import json, os
        from agent_jobs.config import settings
        from agent_jobs.queue.app import app
        import agent_jobs.celery  # `celery -A agent_jobs` imports this
        assert settings.cache_info().currsize == 0, "settings() read at import"
        os.environ["AGENT_JOBS_QUEUE_PREFIX"] = "later"
        os.environ["AGENT_JOBS_BROKER_URL"] = "redis://broker.invalid:6390/4"
        os.environ["AGENT_JOBS_TASK_EVENTS"] = "1"
        os.environ["AGENT_JOBS_SWEEP_INTERVAL_S"] = "7"
        """
        )
        + _REPORT
    )
    at_import = {"AGENT_JOBS_QUEUE_PREFIX": "early", "AGENT_JOBS_BROKER_URL": "memory://localhost/"}
    got = _run(code, at_import)
    assert got["control_exchange"] == "later"
    assert got["event_exchange"] == "later.events"
    assert got["task_default_queue"] == "later.control"
    assert got["queues"] == ["later.control", "later.submit"]
    assert got["routes"] == {
        "agent_jobs.sweep.*": {"queue": "later.control"},
        "agent_jobs.submit": {"queue": "later.submit"},
    }
    assert got["broker_url"] == "redis://broker.invalid:6390/4"
    assert got["polling_interval"] == 1.0  # not the in-process broker's, set at import
    assert got["task_events"] is True
    assert got["sweep_lease"] == 7.0
    assert got["prefetch"] == 1


def test_the_override_module_is_applied_on_top(tmp_path: Path) -> None:
    (tmp_path / "aj_test_override.py").write_text(
        "from kombu import Queue\n"
        "worker_prefetch_multiplier = 4\n"
        "event_exchange = 'overridden.events'\n"
        "_hidden = 1\n"
        "Upper = 2\n"
    )
    code = (
        textwrap.dedent(
            """
        import json, os
        from agent_jobs.queue.app import app
        os.environ["AGENT_JOBS_CELERY_CONFIG"] = "aj_test_override"  # named after import
        """
        )
        + _REPORT
    )
    got = _run(code, {"AGENT_JOBS_QUEUE_PREFIX": "ov", "PYTHONPATH": str(tmp_path)})
    assert got["prefetch"] == 4
    assert got["event_exchange"] == "overridden.events"
    assert got["control_exchange"] == "ov"  # agent_jobs' own, where the module is silent
    assert got["private_or_upper"] == []


def test_the_repositorys_celeryconfig_is_a_valid_override_example() -> None:
    cfg = from_environ({"AGENT_JOBS_CELERY_CONFIG": "celeryconfig"})
    assert app_settings(cfg) == celery_settings(cfg)  # as shipped, every example is commented
    # Its commented examples, uncommented, are Python assigning settings Celery knows.
    from celery.app.defaults import DEFAULTS

    lines = (ROOT / "celeryconfig.py").read_text().split("# Examples", 1)[1].splitlines()[1:]
    example: dict[str, Any] = {}
    exec("\n".join(line.removeprefix("# ") for line in lines), {}, example)
    assert example and set(example) <= set(DEFAULTS)


def test_celery_settings_is_a_pure_function_of_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    embedded = from_environ({})
    deployed = from_environ(
        {
            "AGENT_JOBS_BROKER_URL": "redis://redis:6379/0",
            "AGENT_JOBS_QUEUE_PREFIX": "prod",
            "AGENT_JOBS_TASK_EVENTS": "1",
            "AGENT_JOBS_SWEEP_INTERVAL_S": "5",
        }
    )
    # The environment of this process has nothing to do with it.
    monkeypatch.setenv("AGENT_JOBS_QUEUE_PREFIX", "fromenv")
    monkeypatch.setenv("AGENT_JOBS_BROKER_URL", "redis://fromenv:6379/0")
    a, b = celery_settings(embedded), celery_settings(deployed)
    assert a != b
    assert a == celery_settings(embedded)  # the same settings, the same configuration
    a["task_routes"]["agent_jobs.submit"]["queue"] = "mutated"  # a fresh dict on each call
    assert celery_settings(embedded)["task_routes"]["agent_jobs.submit"] == {"queue": "aj.submit"}

    assert (b["broker_url"], b["control_exchange"], b["event_exchange"]) == (
        "redis://redis:6379/0",
        "prod",
        "prod.events",
    )
    assert b["task_default_queue"] == "prod.control"
    assert [q.name for q in b["task_queues"]] == ["prod.control", "prod.submit"]
    assert [(q.exchange.name, q.exchange.type, q.routing_key) for q in b["task_queues"]] == [
        ("prod.control", "direct", "prod.control"),
        ("prod.submit", "direct", "prod.submit"),
    ]
    assert b["worker_send_task_events"] is True and a["worker_send_task_events"] is False
    assert a["broker_url"] == "memory://localhost/" and a["control_exchange"] == "aj"
    assert a["broker_transport_options"] == {
        "priority_steps": [0],
        "visibility_timeout": 600,
        "polling_interval": 0.005,
    }
    assert b["broker_transport_options"]["polling_interval"] == 1.0
    assert {k: v["schedule"] for k, v in b["beat_schedule"].items()} == {
        **{f"sweep-{kind}": every for kind, every in periods(5.0).items()},
        "release-guardrails": 10.0,  # AGENT_JOBS_GUARDRAILS_INTERVAL_S's default
    }
    guarded = celery_settings(Settings(guardrails_interval_s=2.5))["beat_schedule"]
    assert guarded["release-guardrails"]["schedule"] == 2.5
    assert guarded["release-guardrails"]["task"] == "agent_jobs.release.guardrails"
    assert a["beat_schedule"]["sweep-lease"]["schedule"] == 1.0  # the embedded sweep interval
    for conf in (a, b):
        assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
        assert conf["worker_prefetch_multiplier"] == 1 and conf["task_ignore_result"]
        assert conf["task_create_missing_queues"] and conf["accept_content"] == ["json"]


def test_no_override_module_means_no_overrides() -> None:
    assert override_settings(None) == {} and override_settings("") == {}


def test_the_embedded_workers_pool_threads_run_tasks_on_this_app(tmp_path: Path) -> None:
    """A thread-pool task runs with `current_app`; a pool thread has none of its own, so without
    the app as Celery's default it would run on Celery's fallback app (configured from whatever
    `celeryconfig` is importable) and, e.g., send its retry through that app's broker."""
    code = textwrap.dedent(
        """
        import json, threading
        from celery import current_app
        from agent_jobs.config import settings
        from agent_jobs.queue.app import app
        from agent_jobs.queue.embedded import EmbeddedWorker
        from agent_jobs.store.engine import make_engine
        from agent_jobs.store.migrate import upgrade

        engine = make_engine(settings().database_url)
        upgrade(engine)
        engine.dispose()
        seen = {}
        done = threading.Event()

        @app.task(name="test.which_app", bind=True)
        def which_app(self):
            seen["task_app"] = self.app.main
            seen["current_app"] = current_app._get_current_object().main
            done.set()

        with EmbeddedWorker(concurrency=1, beat_enabled=False):
            which_app.delay()
            assert done.wait(30), "the task did not run"
        print(json.dumps(seen))
        """
    )
    env = {
        "AGENT_JOBS_BROKER_URL": "memory://localhost/",
        "AGENT_JOBS_DATABASE_URL": f"sqlite:///{tmp_path / 'aj.db'}",
        "AGENT_JOBS_QUEUE_PREFIX": "emb",
    }
    # Run where no `celeryconfig` module can configure Celery's fallback app by accident.
    got = _run(code, env, cwd=tmp_path)
    assert got == {"task_app": "agent_jobs", "current_app": "agent_jobs"}
