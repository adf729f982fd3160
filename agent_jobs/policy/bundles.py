"""The registry of policy bundles by version.

Tasks pin a policy version when they start; approvals are bound to it. Looking a version up is how
a grant made under one version is revalidated under the current one.
"""

from __future__ import annotations

from agent_jobs.core.errors import AgentJobsError
from agent_jobs.policy.decisions import PolicyBundle
from agent_jobs.policy.refund import RefundPolicyV3, RefundPolicyV4

CURRENT = "POL-REF-004@4"

_BUNDLES: dict[str, PolicyBundle] = {b.version: b for b in (RefundPolicyV4(), RefundPolicyV3())}


class UnknownPolicyVersion(AgentJobsError):
    """A task or grant names a policy version this deployment does not ship."""

    code = "unknown_policy_version"

    def __init__(self, version: str) -> None:
        super().__init__(
            f"unknown policy version {version!r}; known: {', '.join(sorted(_BUNDLES))}"
        )
        self.version = version


def get_bundle(version: str) -> PolicyBundle:
    """The bundle for an exact version such as `POL-REF-004@4`."""
    try:
        return _BUNDLES[version]
    except KeyError:
        raise UnknownPolicyVersion(version) from None


def known_versions() -> list[str]:
    return sorted(_BUNDLES)
