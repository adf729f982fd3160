"""A lease owner is unique per process and thread, even when the worker's name is set
(`AGENT_JOBS_WORKER_ID`, which prefork children and threads share); people read the name."""

from __future__ import annotations

import os
import threading

from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.core.identity import lease_owner_for, worker_name
from agent_jobs.testing import TEST_SETTINGS

NAMED = TEST_SETTINGS.with_overrides(worker_id="w-12")


def test_threads_of_one_process_own_leases_apart() -> None:
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(NAMED.lease_owner())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen.append(NAMED.lease_owner())
    assert len(set(seen)) == 5
    assert {worker_name(o) for o in seen} == {"w-12"}


def test_a_forked_child_owns_leases_apart_from_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a prefork worker process with the same AGENT_JOBS_WORKER_ID
        os.write(write, NAMED.lease_owner().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 256).decode()
    os.close(read)
    os.close(write)
    assert child != NAMED.lease_owner() and worker_name(child) == "w-12"


@given(st.text(min_size=1, max_size=300), st.integers(1, 2**22), st.integers(1, 2**40))
def test_the_name_comes_back_and_the_owner_fits_its_column(name: str, pid: int, tid: int) -> None:
    owner = lease_owner_for(name, pid, tid)
    assert len(owner) <= 128
    assert worker_name(owner) == name[:100]
