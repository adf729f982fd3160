"""The Celery app. Settings come from `agent_jobs.queue.celery_config`, then from the module named
by AGENT_JOBS_CELERY_CONFIG, if any (e.g. an edited copy of the repository's celeryconfig.py)."""

from __future__ import annotations

import importlib

from celery import Celery

from agent_jobs.config import settings
from agent_jobs.queue.consumers import TenantQueues
from agent_jobs.queue.runtime import bind_app

# The benchmarks' own tasks are not here: `celery -A agent_jobs.bench.app` adds them.
app = Celery("agent_jobs", include=["agent_jobs.queue.tasks", "agent_jobs.api.submit_task"])
app.config_from_object("agent_jobs.queue.celery_config")
_override = settings().celery_config
if _override:
    # Settings are lower-case module attributes; imported classes and helpers are skipped.
    _module = importlib.import_module(_override)
    app.conf.update(
        {k: v for k, v in vars(_module).items() if k.islower() and not k.startswith("_")}
    )
app.steps["consumer"].add(TenantQueues)
# The runtime of this process is built over this app: wiring goes from here to queue/runtime.py.
bind_app(app)
