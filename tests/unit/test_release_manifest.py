"""Manifests: no field without an effect, a content hash that names exactly what was judged,
and hostile JSON refused as `ReleaseInvalid`, never anything else."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.evals.runner import candidate_release, release_manifest
from agent_jobs.releases import Catalog, Manifest, ReleaseInvalid
from agent_jobs.workflows.refund import TOOL_VERSIONS

BASE = {**release_manifest("honest"), "release_id": "rel-a"}
CATALOG = Catalog(
    workflows=frozenset({BASE["workflow"]}),
    routes=frozenset({BASE["model_route"], "support-tier2-loops@2026-03"}),
    prompts=frozenset({BASE["prompt"]}),
    tools={k: frozenset({v}) for k, v in TOOL_VERSIONS.items()},
    policies=frozenset({"POL-REF-004@4", "POL-REF-004@3"}),
    suites=frozenset({BASE["eval_suite"]}),
)


def test_a_rollout_mode_or_share_is_refused_and_a_stored_one_still_reads() -> None:
    legacy = {**BASE, "rollout": {"mode": "canary", "traffic_percent": 5, "flags": {}}}
    with pytest.raises(ReleaseInvalid) as err:
        Manifest.parse(legacy)
    assert len(err.value.problems) == 2
    assert all("release canary|shadow|promote" in p for p in err.value.problems)
    stored = Manifest.parse_stored(legacy)
    assert stored.to_json()["rollout"] == {"flags": {"auto_execute_under_minor": 0}}


def test_every_tool_is_pinned_and_autonomy_never_above_the_bundle() -> None:
    CATALOG.check(Manifest.parse(BASE))
    partial = {**BASE, "tool_schemas": {"refunds.create": "2"}}
    with pytest.raises(ReleaseInvalid, match=r"no version named for 'orders\.get'"):
        CATALOG.check(Manifest.parse(partial))
    at_v3 = {**BASE, "policy_bundle": "POL-REF-004@3"}
    CATALOG.check(
        Manifest.parse({**at_v3, "rollout": {"flags": {"auto_execute_under_minor": 150_000}}})
    )
    with pytest.raises(ReleaseInvalid, match="above POL-REF-004@3's approval threshold"):
        CATALOG.check(
            Manifest.parse({**at_v3, "rollout": {"flags": {"auto_execute_under_minor": 150_001}}})
        )


def test_adversarial_cases_run_the_candidate_with_only_the_route_swapped() -> None:
    cand = {**BASE, "policy_bundle": "POL-REF-004@3"}
    assert candidate_release(cand, "honest") == cand
    loops = candidate_release(cand, "loops")
    assert loops["model_route"] == "support-tier2-loops@2026-03"
    assert loops["release_id"] == "rel-a.loops"
    assert {k: v for k, v in loops.items() if k not in ("model_route", "release_id")} == {
        k: v for k, v in cand.items() if k not in ("model_route", "release_id")
    }
    CATALOG.check(Manifest.parse(loops))


def test_the_hash_is_the_content_whatever_the_key_order() -> None:
    a = Manifest.parse(BASE)
    b = Manifest.parse(json.loads(json.dumps(dict(reversed(list(BASE.items()))))))
    assert a.content_hash() == b.content_hash() and a.content_hash().startswith("sha256:")
    assert Manifest.parse({**BASE, "prompt": "refund-v8"}).content_hash() != a.content_hash()
    flags = {"flags": {"auto_execute_under_minor": 1}}
    assert Manifest.parse({**BASE, "rollout": flags}).content_hash() != a.content_hash()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(sorted(BASE)),
    value=JSON,
    extra=st.dictionaries(st.text(max_size=8), JSON, max_size=2),
)
def test_hostile_manifests_are_refused_as_release_invalid(
    field: str, value: Any, extra: dict[str, Any]
) -> None:
    data = {**BASE, **extra, field: value}
    try:
        m = Manifest.parse(data)
    except ReleaseInvalid as exc:
        assert exc.problems
        return
    try:
        CATALOG.check(m)
    except ReleaseInvalid as exc:
        assert exc.problems
    assert m.content_hash() == Manifest.parse(m.to_json()).content_hash()


@given(st.one_of(st.lists(st.integers(), max_size=2), st.text(), st.integers(), st.none()))
def test_a_manifest_that_is_not_an_object_is_refused(data: Any) -> None:
    with pytest.raises(ReleaseInvalid):
        Manifest.parse(data)


def test_the_readmes_starting_manifest_is_accepted_by_this_deployment() -> None:
    """README's Evaluate and release shows a manifest to start from: it must pass both checks
    `release create` makes (its shape, and every version it names shipped here)."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    # The section's own block (other sections show JSON too: webhook payloads).
    section = text.split("### Evaluate and release", 1)[1].split("\n## ", 1)[0].split("\n### ")[0]
    [block] = re.findall(r"^```json\n(.*?)^```", section, re.S | re.M)
    manifest = Manifest.parse(json.loads(block))
    assert Catalog.current({}).check(manifest) == manifest
