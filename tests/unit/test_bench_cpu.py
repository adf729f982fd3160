"""The benchmarks' CPU reading of another process is finer than the kernel's 10 ms tick: a smoke
run of a few steps uses a few milliseconds of worker CPU, and a tick-granular reading said 0.0
(CI failed on `cpu_ms_per_step == 0` at the smoke size)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent_jobs.bench.procs import cpu_seconds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

# Waits for a line, spins for 3 ms of its own CPU, says so and waits again: a reading before and
# after the spin differs by the spin (plus a little), which a 10 ms tick reads as 0 or 10 ms.
_CHILD = """
import sys, time
print("ready", flush=True)
sys.stdin.readline()
end = time.thread_time() + 0.003
while time.thread_time() < end:
    pass
print("spun", flush=True)
sys.stdin.readline()
"""


def test_a_few_milliseconds_of_another_process_cpu_are_seen() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        before = cpu_seconds(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "spun"
        after = cpu_seconds(child.pid)
    finally:
        child.kill()
        child.wait()
    assert 0.003 <= after - before < 0.009, (before, after)


def test_a_process_that_is_gone_reads_zero() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_seconds(child.pid) == 0.0
