"""Run the IT helpdesk agent end to end: `python -m examples.helpdesk`.

Embedded by default (SQLite and an in-process broker: nothing to install). With `--postgres URL
--redis URL`, the same run on Postgres and a Redis broker (a Celery worker in this process; the
database must exist and is migrated). Device management runs in this process over HTTP (its
OpenAPI document); procurement is an MCP server in a process of its own, over HTTP. Two lost
laptops: LT-100's replacement (EUR 1,290.00) is ordered at once; LT-200's (EUR 2,899.00) waits
for a person, and device management loses its answer after disabling LT-200, which the agent
reconciles by key. The check: each device disabled once, each replacement ordered once, every
reply verified.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import time

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.demo.harness import DemoEnv, timeline, wait_for
from examples.helpdesk import mdm, procurement

LOST = {"LT-100": "e.lind", "LT-200": "a.okafor"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.helpdesk", description=__doc__)
    parser.add_argument("--postgres", help="a database URL (postgresql://...); default SQLite")
    parser.add_argument("--redis", help="a broker URL (redis://host:port/db); default in-process")
    args = parser.parse_args(argv)
    if bool(args.postgres) != bool(args.redis):
        parser.error("--postgres and --redis go together")
    env = DemoEnv(extra={"AGENT_JOBS_WORKFLOWS": "examples.helpdesk.agent"})
    env.env[mdm.DB_ENV] = str(env.dir / "mdm.sqlite3")
    env.env[procurement.DB_ENV] = str(env.dir / "procurement.sqlite3")
    if args.postgres:
        env.env.update(
            AGENT_JOBS_DATABASE_URL=args.postgres,
            AGENT_JOBS_BROKER_URL=args.redis,
            AGENT_JOBS_REDIS_URL=args.redis,
            # Its own queues on a shared Redis, unless the caller names them.
            AGENT_JOBS_QUEUE_PREFIX=os.environ.get("AGENT_JOBS_QUEUE_PREFIX")
            or f"hddemo{os.getpid()}",
            AGENT_JOBS_TOOL_SECRET=os.environ.get("AGENT_JOBS_TOOL_SECRET")
            or secrets.token_urlsafe(32),
        )
    with env:
        service = mdm.serve(0, mdm.Mdm())
        os.environ[mdm.URL_ENV] = f"http://127.0.0.1:{service.server_address[1]}"
        vendor = _procurement_over_http()
        try:
            return _run(
                "Postgres + Redis" if args.postgres else "embedded: SQLite + in-process broker"
            )
        finally:
            vendor.terminate()
            try:
                vendor.wait(2)  # an MCP session still open keeps it waiting: not for long
            except subprocess.TimeoutExpired:
                vendor.kill()
                vendor.wait(10)
            service.shutdown()
            for name in (mdm.URL_ENV, procurement.URL_ENV):
                os.environ.pop(name, None)


def _procurement_over_http() -> subprocess.Popen[bytes]:
    """Procurement's MCP server over streamable HTTP, in a process of its own for this run (the
    agent would spawn it over stdio for each call without HELPDESK_PROCUREMENT_URL: seconds a
    call, the MCP SDK's import)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([sys.executable, str(procurement.SCRIPT), "http", str(port)])
    os.environ[procurement.URL_ENV] = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("procurement's MCP server did not start")


def _run(where: str) -> int:
    # Imported once the environment is set: the Celery config is read at import.
    from agent_jobs.queue.embedded import EmbeddedWorker  # noqa: PLC0415
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
    from agent_jobs.store.migrate import upgrade  # noqa: PLC0415

    print(f"lost_laptop@1 ({where})")
    rt = get_runtime()
    upgrade(rt.store.engine)
    store, orch, devices = rt.store, rt.orchestrator, mdm.Mdm()

    def submit(device_id: str) -> str:
        data = {
            "device_id": device_id,
            "employee": LOST[device_id],
            "reason": "lost while travelling",
        }
        request = TaskRequest(workflow="lost_laptop@1", input=data)
        return orch.submit("acme", f"lost-{device_id}", request, requester=LOST[device_id]).task.id

    with EmbeddedWorker(concurrency=2):
        cheap = submit("LT-100")
        wait_for("LT-100 to finish", lambda: store.get(cheap).status in TERMINAL)
        print("- LT-100 disabled and its replacement (EUR 1,290.00) ordered: under the limit")
        devices.arm("lost_answer")
        print("- device management will lose its answer after the next disable")
        dear = submit("LT-200")
        wait_for(
            "LT-200 to wait for approval", lambda: store.get(dear).status is Status.APPROVAL_WAIT
        )
        (approval,) = store.list_approvals("acme", status="pending", task_id=dear)
        print(
            f"- LT-200's replacement waits for a person: {approval.approval_id}: {approval.reason}"
        )
        orch.decide_approval(approval.approval_id, "it-lead", grant=True, note="confirmed loss")
        print("- it-lead approved the exact order (bound to its hash, single use)")
        ids = [cheap, dear]
        done = wait_for("both tasks", lambda: all(store.get(t).status in TERMINAL for t in ids))
    for task_id in ids:
        task = store.get(task_id)
        print(f"\n{task_id}: {task.status.value}: {(task.outcome or {}).get('reply')}")
        for row in timeline(store.events(task_id)):
            print("   " + row)
    ordered = procurement.orders()
    ok = (
        done
        and all(store.get(t).status is Status.COMPLETED for t in ids)
        and devices.disabled() == ["LT-100", "LT-200"]
        and sorted(o["device_id"] for o in ordered) == ["LT-100", "LT-200"]
        and procurement.order_calls() == 2
        and (store.get(dear).outcome or {})["effects"][0]["reconciled"]
    )
    print(
        f"\ncheck: {len(devices.disabled())} devices disabled in {devices.disable_calls()} calls, "
        f"{len(ordered)} replacements ordered in {procurement.order_calls()} calls, LT-200's "
        f"lost answer reconciled by key -> {'each effect applied once' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
