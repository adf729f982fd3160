"""The switches in Prometheus: one series per switch, in the default registry.

`agent_jobs_ops_switch{kind, tenant, target}` is 1 while the switch is on and 0 once it is off
(tenant "*" means every tenant); `agent_jobs_ops_switch_value` carries the value of the numeric
ones (the autonomy threshold in minor units, the credential epoch in epoch seconds). In
prometheus-client's multiprocess mode the gauges report the highest value among live processes.
"""

from __future__ import annotations

from prometheus_client import Gauge

from agent_jobs.ops.switches import Kind, SwitchKey, SwitchSet

SWITCH = Gauge(
    "agent_jobs_ops_switch",
    "Operator switches: 1 while on, 0 once turned off.",
    ["kind", "tenant", "target"],
    multiprocess_mode="livemax",
)
SWITCH_VALUE = Gauge(
    "agent_jobs_ops_switch_value",
    "The value of numeric operator switches (autonomy threshold, credential epoch).",
    ["kind", "tenant", "target"],
    multiprocess_mode="livemax",
)
_NUMERIC = {Kind.AUTONOMY_THRESHOLD, Kind.CREDENTIAL_EPOCH}


def _labels(key: SwitchKey) -> tuple[str, str, str]:
    return key.kind.value, key.tenant_id or "*", key.target


def export(old: SwitchSet, new: SwitchSet) -> None:
    """Set the series of every switch in `new`; those only in `old` go to 0."""
    for key in old.switches.keys() - new.switches.keys():
        SWITCH.labels(*_labels(key)).set(0)
    for key, switch in new.switches.items():
        SWITCH.labels(*_labels(key)).set(1)
        if key.kind in _NUMERIC:
            SWITCH_VALUE.labels(*_labels(key)).set(float(switch.value))
