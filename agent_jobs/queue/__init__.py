"""Celery: the app, routing to tenant queues, the step task, beat sweepers, worker bootsteps.

The only package (with the CLI that starts workers) that imports Celery.
"""
