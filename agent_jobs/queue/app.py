"""The Celery app. Its settings are `celery_config.celery_settings(settings())`, then those of the
module named by AGENT_JOBS_CELERY_CONFIG, if any (e.g. an edited copy of the repository's
celeryconfig.py), on top.

Nothing is read at import: Celery reads its configuration source when the app's configuration is
first needed (the first `app.conf` read, a worker's or beat's start, the first send), and the
source computes the settings then, from the settings in effect at that moment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from celery import Celery

from agent_jobs.config import settings
from agent_jobs.queue.celery_config import app_settings
from agent_jobs.queue.consumers import TenantQueues
from agent_jobs.queue.runtime import bind_app
from agent_jobs.queue.webhook_deliveries import publish_deliveries
from agent_jobs.store import webhook_outbox


class OnFirstRead(Mapping[str, Any]):
    """A configuration source computed on its first read, then kept. `config_from_object` is
    lazy (Celery reads the source when it configures the app), so the settings are those in
    effect then, not at import. A mapping, not a hook: an error in the settings (a bad
    `AGENT_JOBS_*` value, an override module that does not import) propagates to whoever first
    needed the configuration, where a signal receiver's would only be logged."""

    def __init__(self, compute: Callable[[], Mapping[str, Any]]) -> None:
        self._compute = compute
        self._values: Mapping[str, Any] | None = None

    def _read(self) -> Mapping[str, Any]:
        if self._values is None:
            self._values = self._compute()
        return self._values

    def __getitem__(self, key: str) -> Any:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def _from_process_settings() -> Mapping[str, Any]:
    return app_settings(settings())


# The benchmarks' own tasks are not here: `celery -A agent_jobs.bench.app` adds them.
app = Celery(
    "agent_jobs",
    # kombu's Connection that shows our Redis transport as `redis://` (queue/transport.py).
    amqp="agent_jobs.queue.transport:AMQP",
    include=["agent_jobs.queue.tasks", "agent_jobs.api.submit_task", "agent_jobs.releases.tasks"],
)
app.config_from_object(OnFirstRead(_from_process_settings))
app.steps["consumer"].add(TenantQueues)
# The runtime of this process is built over this app: wiring goes from here to queue/runtime.py.
bind_app(app)
# Webhook events a transition of this process commits go to their tenant's queue at once (the
# `webhooks` sweeper publishes any this misses).
webhook_outbox.on_commit(publish_deliveries)
