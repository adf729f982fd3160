"""The example payout through the incident: a double-tapped request, an approval, the ledger's
response lost after it committed, the worker killed mid-step, its lease expiring, reconciliation
by idempotency key, verification, completion — and a check that every effect happened once."""

from __future__ import annotations

from collections import Counter

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.demo.harness import DemoEnv, Printer, reconciling, timeline, wait_for


def run(*, quiet: bool = False) -> int:
    out = Printer(quiet)
    out.line("agent-jobs demo: the example payout incident (embedded: SQLite + in-process broker)")
    with DemoEnv() as env:
        # Imported after DemoEnv set the environment: the Celery config is read at import.
        from agent_jobs.queue.embedded import EmbeddedWorker  # noqa: PLC0415
        from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
        from agent_jobs.store.migrate import upgrade  # noqa: PLC0415
        from agent_jobs.workflows.example_backend import ExampleBackend  # noqa: PLC0415

        rt = get_runtime()
        upgrade(rt.store.engine)
        ledger = ExampleBackend()
        store, orch = rt.store, rt.orchestrator
        request = TaskRequest(
            workflow="example@1",
            input={"account": "acc_8472", "amount_minor": 200000, "currency": "INR", "reads": 1},
        )
        others = []
        with EmbeddedWorker(concurrency=4) as _:
            first = orch.submit("demo", "req-8472", request, requester="customer-8472")
            second = orch.submit("demo", "req-8472", request, requester="customer-8472")
            out.step(
                f"double tap: two submits with Idempotency-Key req-8472 -> {first.task.id} "
                f"(created={first.created}) and {second.task.id} (created={second.created})"
            )
            for i in range(3):
                others.append(
                    orch.submit(
                        "other",
                        f"small-{i}",
                        TaskRequest(
                            workflow="example@1",
                            input={"account": f"acc_{i}", "amount_minor": 5000 + i},
                        ),
                        requester="svc",
                    ).task.id
                )
            task_id = first.task.id
            wait_for("APPROVAL_WAIT", lambda: store.get(task_id).status is Status.APPROVAL_WAIT)
            approval = store.list_approvals("demo", status="pending", task_id=task_id)[0]
            out.step(
                f"policy: amount >= 100000 needs approval -> {approval.approval_id} "
                "(parked, no worker held)"
            )
            wait_for(
                "the other tenant's payouts",
                lambda: all(store.get(t).status in TERMINAL for t in others),
            )
            out.step("meanwhile tenant 'other' ran 3 small payouts to completion on its own queue")
        out.step(
            "local worker w-12 stopped; worker w-07 will run the approved step in its own process"
        )

        ledger.arm("transfer", "drop_after_commit")
        ledger.arm("lookup", "slow", delay_s=120)
        out.step(
            "armed the ledger: the transfer's response is lost after it commits; "
            "the next lookup hangs"
        )
        orch.decide_approval(
            approval.approval_id, "lead-41", grant=True, note="duplicate capture confirmed"
        )
        out.step("lead-41 granted the approval (bound to the action hash, single use)")

        w07 = env.spawn_worker("w-07", concurrency=1)
        out.step(f"worker w-07 started (pid {w07.pid})")
        wait_for(
            "w-07 reconciling",
            lambda: reconciling(store, task_id, "w-07") and ledger.calls("lookup") >= 1,
        )
        out.step(
            "w-07: intent committed, transfer sent, response lost -> EXEC_UNKNOWN; "
            "w-07 now reconciling"
        )
        env.kill(w07)
        out.step(f"SIGKILL w-07 (pid {w07.pid}) mid-step, holding the lease")

        with EmbeddedWorker(concurrency=4):
            out.step("worker w-12 back; waiting for w-07's lease to expire")
            done = wait_for(
                "completion", lambda: store.get(task_id).status in TERMINAL and store.get(task_id)
            )
            out.step(f"{task_id} reached {done.status.value}: {done.outcome}")

        out.line()
        out.line(f"timeline of {task_id} (trace {done.trace_id}):")
        for row in timeline(store.events(task_id)):
            out.line(row)
        return _checks(out, store, ledger, [task_id, *others], done.status)


def _checks(
    out: Printer, store: object, ledger: object, task_ids: list[str], status: Status
) -> int:
    transfers = ledger.transfers()  # type: ignore[attr-defined]
    per_key = Counter(t.idempotency_key for t in transfers)
    effects = [e for t in task_ids for e in store.effects(t)]  # type: ignore[attr-defined]
    committed = [e for e in effects if e.status == "committed"]
    ok = (
        status is Status.COMPLETED
        and len(transfers) == len(task_ids)
        and all(n == 1 for n in per_key.values())
        and len(committed) == len(task_ids)
        and {e.idempotency_key for e in committed} == set(per_key)
    )
    out.line()
    out.line(
        f"check: {len(task_ids)} tasks, {len(transfers)} transfers in the ledger, "
        f"max {max(per_key.values(), default=0)} per idempotency key, "
        f"{len(committed)} effects committed "
        f"-> {'every effect executed exactly once' if ok else 'FAILED'}"
    )
    return 0 if ok else 1
