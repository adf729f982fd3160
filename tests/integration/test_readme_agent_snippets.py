"""Every fenced block of README's "Write your own agent" and "MCP tool sources" runs as shown:
the MCP source against a real MCP server (its URL and key in the environment, as the block reads
them), the agent as a working agent on the example's orders service, the test file as a user's
test file, in a directory of its own, with only the fixtures installing agent_jobs gives pytest;
the model routes file loaded as a worker loads it. The shell blocks: the demo's command is the
one its own test runs, and loading the agent into the services is run up to its `curl`, which
needs the API. A block added to those sections that no test here runs fails the first test."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.agents import Agent
from agent_jobs.agents.routes import MODEL_ROUTES, routes_and_providers
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.states import Status
from agent_jobs.gateway import OpenAICompatProvider, ScriptedProvider
from agent_jobs.testing import AgentHarness, ScriptedModel
from examples.order_cancel.model import scripted_model
from examples.order_cancel.orders import DB_ENV, orders
from tests.support.mcp_server import HttpServerProcess

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SECTIONS = ("## Write your own agent", "### MCP tool sources")


def section(heading: str) -> str:
    """The text under `heading`, up to the next heading of its level or above."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ", 1)[0]
    ends = [text.find(f"\n{h} ", start + 1) for h in ("#" * n for n in range(1, len(level) + 1))]
    end = min((e for e in ends if e != -1), default=len(text))
    return text[start:end]


def blocks(lang: str) -> list[str]:
    return [body for h in SECTIONS for kind, body in _BLOCK.findall(section(h)) if kind == lang]


def block(lang: str, marker: str) -> str:
    (found,) = [b for b in blocks(lang) if marker in b]
    return found


# What identifies each block a test below runs.
RUN = {
    "python": ("McpSourceConfig(", "workflows = [agent]", "def test_"),
    "json": ('"routes"',),
    # Shell: the demo on Postgres and Redis (run by test_order_cancel_demo.py, with a database
    # and queues of its own), and loading the agent into the services (its `agent-jobs
    # workflows` line run below; its `curl` needs the API of "Run it for real").
    "": ("python -m examples.order_cancel --postgres", "AGENT_JOBS_WORKFLOWS="),
}


def test_every_block_of_the_sections_is_run_here() -> None:
    for lang, markers in RUN.items():
        shown = blocks(lang)
        assert len(shown) == len(markers), f"a {lang} block no test runs: {shown}"
        for body in shown:
            assert sum(m in body for m in markers) == 1, body


@pytest.fixture
def mcp_url(tmp_path: Path) -> Iterator[str]:
    proc = HttpServerProcess(tmp_path)
    try:
        yield proc.url
    finally:
        proc.stop()


def test_the_mcp_source_block_lists_the_server_s_tools(
    mcp_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDERS_MCP_URL", mcp_url)
    monkeypatch.setenv("ORDERS_MCP_KEY", "orders-mcp-key-0123456789")
    ns: dict[str, Any] = {}
    exec(compile(block("python", "McpSourceConfig("), "README.md", "exec"), ns)
    registry = ns["registry"]
    effect = registry.get("orders.create_order")
    assert effect is not None and effect.reconcile_tool == "orders.get_order_by_key"
    assert "idempotency_key" not in effect.args_schema["properties"]
    assert registry.get("orders.get_order") is not None


def test_the_agent_block_is_a_working_agent(
    sqlite_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DB_ENV, str(tmp_path / "orders.sqlite3"))
    ns: dict[str, Any] = {"__name__": "readme_agent"}
    exec(compile(block("python", "workflows = [agent]"), "README.md", "exec"), ns)
    h = AgentHarness(sqlite_store, ns["agent"], ScriptedModel(rules=scripted_model))
    done = h.settle(h.submit_input({"order_id": "A-100", "reason": "ordered twice"}).id)
    assert done.status is Status.COMPLETED, done.outcome
    assert [c["order_id"] for c in orders().cancellations()] == ["A-100"]


def test_the_test_block_passes_as_a_user_s_test_file(tmp_path: Path) -> None:
    plugins = {e.name: e.value for e in importlib.metadata.entry_points(group="pytest11")}
    assert plugins.get("agent_jobs") == "agent_jobs.testing_fixtures", (
        "the installed agent-jobs declares no pytest plugin: reinstall it (pip install -e .)"
    )
    (tmp_path / "test_my_agent.py").write_text(block("python", "def test_"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_agent.py"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout[-3000:] + ran.stderr


def test_the_routes_file_loads_and_serves_an_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "routes.json"
    path.write_text(block("json", '"routes"'))
    monkeypatch.setenv("LOCAL_LLM_KEY", "local-llm-key-0123456789")
    scripted = ScriptedProvider(scripted_model)
    routes, providers = routes_and_providers(str(path), scripted)
    assert set(routes) == {"orders-scripted@2026-03", "orders@2026-03"}
    local = providers["local"]
    assert isinstance(local, OpenAICompatProvider) and local.base_url.endswith("/v1")
    real = routes["orders@2026-03"]
    assert real.fallback is not None and real.fallback.allowed_for == {"reply"}
    assert real.budgets.max_calls_per_task == 10 and real.price_for(real.primary.model)
    # An agent naming a route of the file runs on it, with its scripted model.
    monkeypatch.setenv(MODEL_ROUTES, str(path))
    agent = Agent("routed", prompt="p", model_route="orders-scripted@2026-03",
                  scripted_model=scripted_model)  # fmt: skip
    assert agent.services.gateway.route("orders-scripted@2026-03").primary.provider == "scripted"
    monkeypatch.delenv("LOCAL_LLM_KEY")
    with pytest.raises(ConfigError, match="LOCAL_LLM_KEY"):  # the key must be set to load it
        routes_and_providers(str(path), scripted)


def test_the_demo_command_is_the_one_its_test_runs() -> None:
    shown = " ".join(block("", "python -m examples.order_cancel --postgres").split())
    assert re.fullmatch(r"python -m examples\.order_cancel --postgres \S+ \\ --redis \S+", shown)
    demo = (Path(__file__).parent / "test_order_cancel_demo.py").read_text(encoding="utf-8")
    assert '"-m", "examples.order_cancel"' in demo
    assert 'run("--postgres", database, "--redis"' in demo


def test_loading_the_agent_into_the_services_lists_it(tmp_path: Path) -> None:
    shell = block("", "AGENT_JOBS_WORKFLOWS=")
    exported = dict(re.findall(r"(\w+)=(\S+)", shell.split("\n.venv/bin/agent-jobs")[0]))
    root = str(README.parent)
    env = {**os.environ, **{k: v.replace("$PWD", root) for k, v in exported.items()}}
    env["ORDER_CANCEL_DB"] = str(tmp_path / "order_cancel.sqlite3")
    line = next(x for x in shell.splitlines() if "agent-jobs workflows" in x)
    command, _, said = line.partition("#")
    assert command.split() == [".venv/bin/agent-jobs", "workflows"]
    ran = subprocess.run([str(Path(sys.executable).parent / "agent-jobs"), "workflows"],
                         check=False, cwd=root, env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    row = next(x for x in ran.stdout.splitlines() if x.startswith("order_cancel "))
    assert "module examples.order_cancel.agent" in row and "order_cancel@1" in said
