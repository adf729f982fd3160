"""The control plane's incident levers: operator switches, durable and audited.

`switches` is the model and the `Switches` port (pure); `live` is the store-backed cache every
worker and API process obeys (Redis pub/sub plus a periodic re-read); `service` is what the CLI
and the API call to change a switch, query an incident or replay a dead letter.
"""

from agent_jobs.ops.switches import (
    ALL,
    NO_SWITCHES,
    POLL_INTERVAL_S,
    Kind,
    StaticSwitches,
    Switch,
    Switches,
    SwitchKey,
    SwitchSet,
)

__all__ = [
    "ALL",
    "NO_SWITCHES",
    "POLL_INTERVAL_S",
    "Kind",
    "StaticSwitches",
    "Switch",
    "SwitchKey",
    "SwitchSet",
    "Switches",
    "autonomy_threshold_minor",
]


def autonomy_threshold_minor(tenant_id: str = ALL) -> int | None:
    """The operator's cap on what may execute without a person (minor units), or None: the
    policy's own thresholds. Set to 0 in an incident, every action goes to an approver."""
    from agent_jobs.ops.live import current  # noqa: PLC0415 - keeps `policy` free of redis

    return current().autonomy_threshold(tenant_id)
