"""The gateway is a port: it imports neither Celery nor SQLAlchemy nor the layers above it."""

from __future__ import annotations

import subprocess
import sys


def test_gateway_loads_no_queue_store_or_orchestrator() -> None:
    code = (
        "import sys, agent_jobs.gateway, agent_jobs.gateway.testing, agent_jobs.gateway.costmodel\n"
        "bad = ('celery', 'kombu', 'sqlalchemy', 'agent_jobs.store', 'agent_jobs.queue',"
        " 'agent_jobs.orchestrator', 'agent_jobs.policy', 'agent_jobs.tools')\n"
        "print(','.join(m for m in sys.modules if m.startswith(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
