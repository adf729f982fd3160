"""Celery settings override point: an example.

agent_jobs configures Celery itself, from the AGENT_JOBS_* settings
(`agent_jobs.queue.celery_config.celery_settings`). Point AGENT_JOBS_CELERY_CONFIG at a module
such as this one (AGENT_JOBS_CELERY_CONFIG=celeryconfig, or an edited copy elsewhere on the
Python path) and its lower-case names are applied on top of agent_jobs' own, when the app is
first configured; names starting with `_` and upper-case names (imported classes) are ignored.
A setting given here replaces agent_jobs' value whole: a dict is not merged with it.
"""

# Examples (uncomment and edit):
# worker_max_tasks_per_child = 1000
# broker_transport_options = {
#     "priority_steps": [0],
#     "visibility_timeout": 1800,
#     "polling_interval": 1.0,
# }
