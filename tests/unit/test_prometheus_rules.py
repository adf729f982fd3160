"""The SLI recording rules and burn-rate alerts (deploy/prometheus) pass their promtool unit tests.

Skipped where promtool is not installed (Debian: `apt-get install prometheus`), except under
AGENT_JOBS_REQUIRE_SERVICES=1, as in CI (.ci/run installs it), where a missing promtool fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.services import require_services

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# A raw metric name, not a part of a recording rule's `level:metric:operations`.
_RAW = re.compile(r"(?<![:\w])agent_jobs_[a-z_]+(?![:\w])")


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if require_services():
            pytest.fail(
                "promtool is required (AGENT_JOBS_REQUIRE_SERVICES=1): apt-get install prometheus"
            )
        pytest.skip("promtool is not installed")
    return path


def test_the_rules_pass_their_promtool_unit_tests() -> None:
    run = subprocess.run(
        [_promtool(), "test", "rules", "tests.yml"],
        cwd=DEPLOY / "prometheus",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_rule_file_prometheus_loads_is_valid() -> None:
    config = DEPLOY / "prometheus.yml"
    slo = DEPLOY / "prometheus"
    rules = [DEPLOY / "alerts.yml", slo / "rules.yml", slo / "alerts.yml"]
    run = subprocess.run(
        [_promtool(), "check", "rules", *map(str, rules)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # The compose Prometheus loads the SLO files too (mounted under /etc/prometheus/slo).
    text = config.read_text()
    for name in ("slo/rules.yml", "slo/alerts.yml"):
        assert name in text, name


def test_the_dashboard_reads_only_recorded_or_exported_series() -> None:
    """Every recording rule the Grafana dashboard queries exists, and every raw metric it
    queries is one agent_jobs exports (obs/metrics.py names are the source of truth)."""
    import json

    import yaml  # type: ignore[import-untyped]
    from prometheus_client import REGISTRY

    import agent_jobs.obs.metrics  # noqa: F401 - registers the metrics

    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"]}
    exported = {
        name for m in REGISTRY.collect() for name in (m.name, m.name + "_total", m.name + "_bucket")
    }
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "agent-jobs-slis.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    for expr in exprs:
        for name in re.findall(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", expr):
            assert name in recorded, name
        for name in re.findall(_RAW, expr):
            assert name in exported, name
    for group in rules["groups"]:
        for rule in group["rules"]:
            for name in re.findall(_RAW, rule["expr"]):
                assert name in exported, name
