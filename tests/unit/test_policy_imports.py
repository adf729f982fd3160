"""`policy` is trusted code: it imports nothing that could call a model, a tool or the network."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agent_jobs.policy

POLICY_DIR = Path(agent_jobs.policy.__file__).parent
ALLOWED_ROOTS = {"__future__", "collections", "datetime", "typing", "pydantic", "agent_jobs"}
ALLOWED_PROJECT = ("agent_jobs.core", "agent_jobs.policy")


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_policy_sources_import_only_an_allow_list() -> None:
    for path in sorted(POLICY_DIR.glob("*.py")):
        for name in _imports(path):
            assert name.split(".")[0] in ALLOWED_ROOTS, f"{path.name} imports {name}"
            if name.startswith("agent_jobs"):
                assert name.startswith(ALLOWED_PROJECT), f"{path.name} imports {name}"


def test_importing_policy_loads_no_network_or_model_client() -> None:
    code = (
        "import sys, agent_jobs.policy\n"
        "bad = ('requests', 'urllib3', 'http.client', 'httpx', 'openai', 'celery', 'sqlalchemy',"
        " 'agent_jobs.tools', 'agent_jobs.gateway', 'agent_jobs.verify', 'agent_jobs.store')\n"
        "print(','.join(m for m in sys.modules if m.startswith(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_tools_and_verify_do_not_import_celery_sqlalchemy_or_upper_layers() -> None:
    code = (
        "import sys, agent_jobs.tools, agent_jobs.verify, agent_jobs.tools.refund_tools\n"
        "import agent_jobs.tools.testing\n"
        "bad = ('celery', 'kombu', 'sqlalchemy', 'agent_jobs.store', 'agent_jobs.queue',"
        " 'agent_jobs.orchestrator', 'agent_jobs.gateway')\n"
        "print(','.join(m for m in sys.modules if m.startswith(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
