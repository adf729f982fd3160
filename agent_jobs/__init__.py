"""agent_jobs: a durable, multi-tenant job queue for AI-agent tasks.

The package root deliberately imports nothing heavy: `agent_jobs.core` stays pure, and the Celery
app lives in `agent_jobs.celery` (found by `celery -A agent_jobs`).
"""

__version__ = "0.1.0"
