"""Observability: Prometheus metrics (`metrics`) and broker queue gauges (`queues`).

Importing this package imports prometheus_client; a prefork worker that should run in
multiprocess mode must have PROMETHEUS_MULTIPROC_DIR set before that (`agent-jobs worker` does).
"""
