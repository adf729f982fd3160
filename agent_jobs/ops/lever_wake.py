"""A write lever turned off wakes the tasks it held, as a pause turned off releases its tasks.

A task a lever holds is parked in RETRY_WAIT (HELD_BY_OPERATOR) and asks the lever again on a
backoff that reaches a minute (`core.holds.held_poll_s`); without this, turning the lever off
would leave its tasks waiting up to AGENT_JOBS_HELD_POLL_MAX_S. The process that turns it off
makes them due at once and publishes their steps through its gate, so each goes to its tenant's
queue (fairness kept; a tenant at its cap, or paused, is held there as any step is). Waking
sends nothing by itself: the step asks the levers and the policy of now before any resend
(invariant 11). A process that dies between the change and this leaves them to their own poll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent_jobs.core.park import Park
from agent_jobs.ops.live import to_set
from agent_jobs.ops.switches import WRITE_LEVERS, SwitchKey, wakes_on_clear
from agent_jobs.store import Dispatch, Store
from agent_jobs.store.holds import wake_lever_held

log = logging.getLogger(__name__)


def wake_held(store: Store, cleared: SwitchKey, publish: Callable[[Dispatch], None]) -> int:
    """After `cleared` was turned off (committed): the tasks it parked, due now and published.
    How many."""
    if cleared.kind not in WRITE_LEVERS:
        return 0
    now = to_set(store.switches())

    def wakes(tenant_id: str, park: Park, tool: str | None) -> bool:
        return wakes_on_clear(cleared, park.detail, tool, tenant_id, now)

    try:
        woken = wake_lever_held(store, cleared.tenant_id or None, wakes)
    except Exception:
        # The lever is off (committed) whatever happens here: its tasks still wake at their
        # own poll, so a failed wake must not make the change look failed to the operator.
        log.exception("%s turned off; waking the tasks it held failed", cleared.label())
        return 0
    for dispatch in woken:
        publish(dispatch)
    if woken:
        log.info("%s turned off: %d held task(s) woken", cleared.label(), len(woken))
    return len(woken)
