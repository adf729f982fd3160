"""Run the order-cancellation agent end to end: `python -m examples.order_cancel`.

Embedded by default (SQLite and an in-process broker: nothing to install). With `--postgres URL
--redis URL`, the same run on Postgres and a Redis broker (a Celery worker in this process; the
database must exist and is migrated). It submits a cancellation under the threshold (done at
once) and one above it (a person approves), makes the orders service time out after it cancels,
and checks the agent reconciled that by key: every order cancelled once, every reply verified.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.demo.harness import DemoEnv, timeline, wait_for
from examples.order_cancel.orders import DB_ENV


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.order_cancel", description=__doc__)
    parser.add_argument("--postgres", help="a database URL (postgresql://...); default SQLite")
    parser.add_argument("--redis", help="a broker URL (redis://host:port/db); default in-process")
    args = parser.parse_args(argv)
    if bool(args.postgres) != bool(args.redis):
        parser.error("--postgres and --redis go together")
    env = DemoEnv(extra={"AGENT_JOBS_WORKFLOWS": "examples.order_cancel.agent"})
    env.env[DB_ENV] = str(env.dir / "orders.sqlite3")
    if args.postgres:
        env.env.update(
            AGENT_JOBS_DATABASE_URL=args.postgres,
            AGENT_JOBS_BROKER_URL=args.redis,
            AGENT_JOBS_REDIS_URL=args.redis,
            # Its own queues on a shared Redis, unless the caller names them.
            AGENT_JOBS_QUEUE_PREFIX=os.environ.get("AGENT_JOBS_QUEUE_PREFIX")
            or f"ocdemo{os.getpid()}",
            AGENT_JOBS_TOOL_SECRET=os.environ.get("AGENT_JOBS_TOOL_SECRET")
            or secrets.token_urlsafe(32),
        )
    with env:
        return _run("Postgres + Redis" if args.postgres else "embedded: SQLite + in-process broker")


def _run(where: str) -> int:
    # Imported once the environment is set: the Celery config is read at import.
    from agent_jobs.queue.embedded import EmbeddedWorker  # noqa: PLC0415
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
    from agent_jobs.store.migrate import upgrade  # noqa: PLC0415
    from examples.order_cancel.orders import orders  # noqa: PLC0415

    print(f"order_cancel@1 ({where})")
    rt = get_runtime()
    upgrade(rt.store.engine)
    store, orch, shop = rt.store, rt.orchestrator, orders()

    def submit(key: str, order_id: str) -> str:
        request = TaskRequest(
            workflow="order_cancel@1", input={"order_id": order_id, "reason": "ordered twice"}
        )
        return orch.submit("acme", key, request, requester="customer-1").task.id

    with EmbeddedWorker(concurrency=2):
        small = submit("cancel-a100", "A-100")
        big = submit("cancel-a200", "A-200")
        wait_for(
            "A-200 to wait for approval", lambda: store.get(big).status is Status.APPROVAL_WAIT
        )
        # A-100 needs no person: let it finish first, so the fault armed next is A-200's.
        wait_for("A-100 to finish", lambda: store.get(small).status in TERMINAL)
        (approval,) = store.list_approvals("acme", status="pending", task_id=big)
        print(f"- A-200 (EUR 250.00) waits for a person: {approval.approval_id}: {approval.reason}")
        shop.arm("timeout_after_commit")
        print("- the orders service will time out after its next cancel commits")
        orch.decide_approval(approval.approval_id, "lead-7", grant=True, note="customer confirmed")
        print("- lead-7 approved the exact action (bound to its hash, single use)")
        ids = [small, big]
        done = wait_for("both tasks", lambda: all(store.get(t).status in TERMINAL for t in ids))
    for task_id in ids:
        task = store.get(task_id)
        print(f"\n{task_id}: {task.status.value}: {(task.outcome or {}).get('reply')}")
        for row in timeline(store.events(task_id)):
            print("   " + row)
    cancelled = shop.cancellations()
    ok = (
        done
        and all(store.get(t).status is Status.COMPLETED for t in ids)
        and sorted(c["order_id"] for c in cancelled) == ["A-100", "A-200"]
        and shop.cancel_calls() == 2
        and (store.get(big).outcome or {})["effects"][0]["reconciled"]
    )
    print(
        f"\ncheck: {len(cancelled)} cancellations, {shop.cancel_calls()} cancel calls, A-200's "
        f"timeout reconciled by key -> {'every order cancelled once' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
