"""`celery -A agent_jobs worker|beat|flower` finds the app here."""

from agent_jobs.queue.app import app

__all__ = ["app"]
