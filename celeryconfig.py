"""Celery settings override point.

agent_jobs loads its own settings from `agent_jobs.queue.celery_config` (derived from the
AGENT_JOBS_* environment). To change a Celery setting, copy this file, add assignments below the
import, and point AGENT_JOBS_CELERY_CONFIG at it, e.g. AGENT_JOBS_CELERY_CONFIG=celeryconfig.
"""

from agent_jobs.queue.celery_config import *  # noqa: F403

# Examples:
# worker_max_tasks_per_child = 1000
# broker_transport_options = {**broker_transport_options, "visibility_timeout": 1800}
