"""A release manifest (seed 004): the seven things that change an agent's behaviour, named together.

A manifest is what gets evaluated, rolled out and rolled back. It is validated twice: its shape
here (pydantic), and that every version it names exists in this deployment (`Catalog.check`), so
a manifest naming a prompt or route no worker ships is refused when it is created, not when the
first task pinned to it fails.

No field is decoration: a task pinned to a release runs its model route, prompt, tool schema
versions, policy bundle and flags (`store.releases.release_pins`, read by the workflow), and the
gate (`evals.gate`) evaluates exactly those. What a manifest cannot make true it refuses: a
rollout mode or traffic share (the `release canary|shadow|promote` commands decide those), an
autonomy flag above the policy bundle's own approval threshold, a partial tool list.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_jobs.core.errors import AgentJobsError

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")

# Retrieval indexes this deployment can serve. The simulator's policy documents are the index.
RETRIEVAL_INDEXES = frozenset({"policy-kb@2026-03-10"})


class ReleaseInvalid(AgentJobsError):
    """A manifest is malformed or names a version that does not exist; or (`what` says which)
    a promote or a phase change its gate refuses."""

    code = "release_invalid"

    def __init__(self, problems: Iterable[str], what: str = "invalid release manifest") -> None:
        self.problems = list(problems)
        super().__init__(f"{what}: " + "; ".join(self.problems))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Flags(_Frozen):
    """Behaviour switches that apply without a deploy. `auto_execute_under_minor`: refunds below
    this amount (minor units) may execute without approval; 0 means every refund needs a human.
    It only lowers the policy bundle's own threshold (a manifest above it is refused)."""

    auto_execute_under_minor: int = Field(default=0, ge=0, le=10**15)


# Fields earlier manifests carried that never took effect: how a release reaches traffic is the
# rollout commands' decision. Refused in a new manifest; dropped when a stored one is read.
LEGACY_ROLLOUT_FIELDS = ("mode", "traffic_percent")


class Rollout(_Frozen):
    flags: Flags = Field(default_factory=Flags)


class Manifest(_Frozen):
    """`release_id` plus exact versions of route, prompt, tool schemas, workflow, policy bundle,
    retrieval index and eval suite (the seed's JSON, field for field)."""

    release_id: str = Field(pattern=_ID.pattern)
    model_route: str = Field(min_length=3)
    prompt: str = Field(min_length=1)
    tool_schemas: dict[str, str] = Field(min_length=1)
    workflow: str = Field(min_length=3)
    policy_bundle: str = Field(min_length=3)
    retrieval_index: str = Field(min_length=3)
    eval_suite: str = Field(min_length=3)
    rollout: Rollout = Field(default_factory=Rollout)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Manifest:
        """Validate the shape, raising `ReleaseInvalid` with one line per problem."""
        if not isinstance(data, Mapping):
            raise ReleaseInvalid(["manifest: must be a JSON object"])
        rollout = data.get("rollout")
        legacy = [f for f in LEGACY_ROLLOUT_FIELDS if isinstance(rollout, Mapping) and f in rollout]
        try:
            manifest = cls.model_validate(dict(data))
        except ValidationError as exc:
            raise ReleaseInvalid(
                _legacy_message(loc)
                if e["loc"][-1:] in [(f,) for f in legacy]
                else f"{loc}: {e['msg']}"
                for e in exc.errors()
                for loc in [".".join(str(p) for p in e["loc"]) or "manifest"]
            ) from None
        return manifest

    @classmethod
    def parse_stored(cls, data: Mapping[str, Any]) -> Manifest:
        """A manifest as stored: one created before the legacy rollout fields were refused
        still reads (they never had an effect, so dropping them changes nothing)."""
        rollout = data.get("rollout")
        if isinstance(rollout, Mapping):
            kept = {k: v for k, v in rollout.items() if k not in LEGACY_ROLLOUT_FIELDS}
            data = {**data, "rollout": kept}
        return cls.parse(data)

    def content_hash(self) -> str:
        """`sha256:<hex>` of the canonical JSON: what an eval evaluated and promote checks."""
        canonical = json.dumps(
            self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def pins(self) -> dict[str, Any]:
        """What a task created under this release pins, on top of the workflow's own pins."""
        from agent_jobs.store.releases import release_pins  # noqa: PLC0415

        return release_pins(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class Catalog:
    """The versions this deployment ships; `check` refuses a manifest naming anything else."""

    workflows: frozenset[str]
    routes: frozenset[str]
    prompts: frozenset[str]
    tools: Mapping[str, frozenset[str]]
    policies: frozenset[str]
    indexes: frozenset[str] = RETRIEVAL_INDEXES
    suites: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def current(cls, environ: Mapping[str, str] | None = None) -> Catalog:
        """What this process would run: registered workflows, configured model routes, the
        shipped prompt and tool versions, policy bundles and registered eval suites."""
        import os  # noqa: PLC0415

        from agent_jobs.evals.suites import suite_versions  # noqa: PLC0415
        from agent_jobs.policy.bundles import known_versions  # noqa: PLC0415
        from agent_jobs.workflows import default_registry  # noqa: PLC0415
        from agent_jobs.workflows.refund import PROMPT_VERSION, TOOL_VERSIONS  # noqa: PLC0415
        from agent_jobs.workflows.refund.wiring import (  # noqa: PLC0415
            MODEL_ROUTES,
            routes_and_providers,
        )

        env = os.environ if environ is None else environ
        routes, _ = routes_and_providers(env.get(MODEL_ROUTES) or None)
        return cls(
            workflows=frozenset(default_registry().names()),
            routes=frozenset(routes),
            prompts=frozenset({PROMPT_VERSION}),
            tools={name: frozenset({v}) for name, v in TOOL_VERSIONS.items()},
            policies=frozenset(known_versions()),
            suites=frozenset(suite_versions()),
        )

    def problems(self, m: Manifest) -> list[str]:
        out = self._tool_problems(m)
        for what, value, known in (
            ("workflow", m.workflow, self.workflows),
            ("model_route", m.model_route, self.routes),
            ("prompt", m.prompt, self.prompts),
            ("policy_bundle", m.policy_bundle, self.policies),
            ("retrieval_index", m.retrieval_index, self.indexes),
            ("eval_suite", m.eval_suite, self.suites),
        ):
            if value not in known:
                out.append(f"{what} {value!r} does not exist (known: {', '.join(sorted(known))})")
        if m.policy_bundle in self.policies:
            out += _flag_problems(m)
        return out

    def _tool_problems(self, m: Manifest) -> list[str]:
        out = []
        for tool, version in sorted(m.tool_schemas.items()):
            if tool not in self.tools:
                out.append(f"tool_schemas: no tool {tool!r}")
            elif version not in self.tools[tool]:
                out.append(
                    f"tool_schemas: {tool} version {version!r} does not exist "
                    f"(known: {', '.join(sorted(self.tools[tool]))})"
                )
        # A task pins the manifest's tool versions as its whole set: a tool left out would be
        # unpinned, and the task would stop at its first call of it.
        out += [
            f"tool_schemas: no version named for {tool!r} (every tool of the workflow is pinned)"
            for tool in sorted(set(self.tools) - set(m.tool_schemas))
        ]
        return out

    def check(self, m: Manifest) -> Manifest:
        found = self.problems(m)
        if found:
            raise ReleaseInvalid(found)
        return m


def _legacy_message(loc: str) -> str:
    return (
        f"{loc}: not a manifest field (a rollout's mode and traffic share are set by "
        "`release canary|shadow|promote`, never by the manifest)"
    )


def _flag_problems(m: Manifest) -> list[str]:
    """The autonomy flag may lower the bundle's approval threshold, never raise it: a value
    above it would be refused by the policy at decision time, so the manifest refuses it now."""
    from agent_jobs.policy.bundles import get_bundle  # noqa: PLC0415

    thresholds = dict(getattr(get_bundle(m.policy_bundle), "approval_thresholds_minor", {}))
    flag = m.rollout.flags.auto_execute_under_minor
    ceiling = min(thresholds.values(), default=0)
    if flag > ceiling:
        return [
            f"rollout.flags.auto_execute_under_minor {flag} is above {m.policy_bundle}'s approval "
            f"threshold ({ceiling} minor units): a release may lower it, never raise it"
        ]
    return []
