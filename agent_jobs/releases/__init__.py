"""Releases: manifests that name every version that changes behaviour, pinning at task creation,
rollout (shadow, canary by tenant, per-tenant phases) and guardrails that revert a canary.

    from agent_jobs.releases import Manifest, Catalog
    manifest = Manifest.model_validate(json_data)
    Catalog.current().check(manifest)           # every named version exists, or ReleaseInvalid
"""

from agent_jobs.releases.manifest import (
    RETRIEVAL_INDEXES,
    Catalog,
    Flags,
    Manifest,
    ReleaseInvalid,
    Rollout,
)

__all__ = ["RETRIEVAL_INDEXES", "Catalog", "Flags", "Manifest", "ReleaseInvalid", "Rollout"]
