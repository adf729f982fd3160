"""How the CLI prints tasks, events and approvals."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agent_jobs.core.contracts import ApprovalView, EventView, TaskView


def to_json(value: Any) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [v.model_dump(mode="json") if hasattr(v, "model_dump") else v for v in value]
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _t(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if at else "-"


def task_text(view: TaskView) -> str:
    lines = [
        f"task       {view.task_id}",
        f"tenant     {view.tenant_id}",
        f"workflow   {view.workflow}",
        f"status     {view.status.value} ({view.display_status})",
        f"version    {view.version}   attempts {view.attempts}",
        f"trace      {view.trace_id}",
        f"created    {_t(view.created_at)}   updated {_t(view.updated_at)}",
    ]
    if view.park is not None:
        park = view.park
        lines.append(f"parked     {park.reason.value}: waits for {park.waits_for}")
        lines.append(f"on waking  {park.on_waking} ({park.resume.value})")
        if park.detail:
            lines.append(f"why        {park.detail}")
    if view.approval_id:
        lines.append(f"approval   {view.approval_id}")
    if view.pending_action:
        pa = view.pending_action
        lines.append(f"pending    {pa.get('tool')} key={pa.get('idempotency_key')}")
    if view.outcome is not None:
        lines.append(f"outcome    {json.dumps(view.outcome, sort_keys=True)}")
    return "\n".join(lines)


def event_line(e: EventView) -> str:
    move = (
        f"{e.from_status.value if e.from_status else '-'} -> {e.to_status.value}"
        if e.to_status
        else ""
    )
    data = json.dumps(e.data, sort_keys=True) if e.data else ""
    return f"{e.seq:>4}  {_t(e.at)}  {e.type:<28} {move:<30} {data}".rstrip()


def approval_line(a: ApprovalView) -> str:
    args = json.dumps(a.args, sort_keys=True)
    return (
        f"{a.approval_id}  {a.status:<8} task={a.task_id} tenant={a.tenant_id} "
        f"{a.tool}@{a.tool_version} {args} policy={a.policy_version} "
        f"requester={a.requester} expires={_t(a.expires_at)}"
    )
