"""`celery -A agent_jobs.bench.app worker`: the production app with the benchmarks' own tasks
registered on it (the transitions bench's floor, the peers bench's plain chain), so both sides of
a comparison run on the same worker processes, queues and settings. Production workers
(`celery -A agent_jobs`) never import them."""

from agent_jobs.bench import floor_task  # noqa: F401 - registers the benchmark tasks on the app
from agent_jobs.queue.app import app

__all__ = ["app"]
