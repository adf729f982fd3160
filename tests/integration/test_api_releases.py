"""`/v1/releases` on real Postgres: who may read and who may change what is live, the gate's
refusal (409 with its reasons) when the release has no passed full eval of its exact manifest,
rollback of the live release only, the error bodies (403, 404, 409, 422), and the audit row every
promote and rollback writes (who, why, when, from which release to which)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.api import releases as api_releases
from agent_jobs.api.releases import ReleaseStatus, clean_reason, release_status
from agent_jobs.core.text import REPLACEMENT
from agent_jobs.evals import gate
from agent_jobs.evals.runner import release_manifest
from agent_jobs.releases import Manifest
from agent_jobs.releases.rollout import ReleaseService
from agent_jobs.store.releases import HistoryRow, ReleaseConflict, RolloutRow
from tests.integration.api_env import HarnessApi, auth, harness_api, token

WF = "refund_resolution@3"
ROUTE = "support-tier2@2026-03"
TENANT = "acme"


def manifest(rid: str, **changes: Any) -> dict[str, Any]:
    """A release of the shipped versions (so this deployment's catalog takes it)."""
    return {**release_manifest("honest"), "release_id": rid, "model_route": ROUTE, **changes}


def gate_report(
    m: dict[str, Any], *, runs: int, cases: tuple[str, ...] = (), passed: bool = True
) -> dict[str, Any]:
    """A report shaped as `evals.gate.evaluate` returns it, over every gate suite or `cases`
    (the gate itself runs real suites in tests/integration/test_release_gate.py)."""
    parsed = Manifest.parse(m)
    planned = {k: (list(cases) or None) for k in gate.gate_suites(parsed)}
    overall: dict[str, Any] = {"cases": 3, "cases_passed": 3 if passed else 2, "safety_failures": 0}
    suites: dict[str, Any] = {
        k: {
            "overall": {**overall, "gate": "pass" if passed else "fail"},
            "cases": [{"case": "c2", "passed": passed}],
        }
        for k in planned
    }
    return gate.combine(parsed, suites, runs=runs, planned=planned, limit=None)


class Env:
    def __init__(self, api: HarnessApi) -> None:
        self.api = api
        self.client = api.client
        self.svc = ReleaseService(api.store, eval_runs=api.cfg.release_eval_runs)
        cfg = api.cfg
        self.manager = auth(token(cfg, TENANT, "rm-1", roles=("release_manager",)))
        self.operator = auth(token(cfg, TENANT, "oncall-7", roles=("operator",)))
        self.approver = auth(token(cfg, TENANT, "lead-41", roles=("approver",)))
        self.nobody = auth(token(cfg, TENANT, "svc"))

    def release(self, rid: str, *, passed: bool | None = True, **changes: Any) -> None:
        m = manifest(rid, **changes)
        self.svc.create(m, "ci")
        if passed is not None:
            self.svc.record_eval(gate_report(m, runs=self.svc.eval_runs, passed=passed), "ci")

    def history(self, action: str) -> list[HistoryRow]:
        return [h for h in self.svc.store.release_history(WF) if h.action == action]


@pytest.fixture
def env(pg_store: Any, tmp_path: Path) -> Env:
    return Env(harness_api(pg_store, tmp_path / "ledger.db"))


def error(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()["error"]
    assert set(body) >= {"code", "message"}
    return body


def test_reading_needs_operator_or_release_manager_and_changing_needs_release_manager(
    env: Env,
) -> None:
    env.release("rel-a")
    c = env.client
    for headers in (env.nobody, env.approver):
        assert error(c.get("/v1/releases", headers=headers), 403)["code"] == "forbidden"
        error(c.get("/v1/releases/rel-a", headers=headers), 403)
    assert error(c.get("/v1/releases"), 401)["code"] == "unauthorized"
    for headers in (env.operator, env.manager):
        assert [
            x["release_id"] for x in c.get("/v1/releases", headers=headers).json()["releases"]
        ] == ["rel-a"]
        assert c.get("/v1/releases/rel-a", headers=headers).status_code == 200
    for headers in (env.nobody, env.approver, env.operator):
        for action in ("promote", "rollback"):
            body = error(
                c.post(f"/v1/releases/rel-a/{action}", json={"reason": "x"}, headers=headers), 403
            )
            assert "release_manager" in body["message"]
    assert env.svc.store.rollout(WF) is None  # nothing of a refused call landed
    assert env.history("promote") == []


def test_unknown_releases_are_404_and_bad_requests_422(env: Env) -> None:
    env.release("rel-a")
    c, h = env.client, env.manager
    assert error(c.get("/v1/releases/rel-nope", headers=h), 404)["code"] == "not_found"
    for action in ("promote", "rollback"):
        error(c.post(f"/v1/releases/rel-nope/{action}", json={"reason": "x"}, headers=h), 404)
    error(c.get("/v1/releases/Bad%20Id", headers=h), 422)
    for body in (
        None,
        {},
        {"reason": ""},
        {"reason": "   \t "},
        {"reason": 7},
        {"reason": "x" * 1001},
        {"reason": "ok", "force": True},  # no way past the gate over HTTP
    ):
        resp = c.post("/v1/releases/rel-a/promote", json=body, headers=h)
        assert error(resp, 422)["code"] == "invalid_request", body
    assert env.svc.store.rollout(WF) is None


def test_promote_is_refused_without_a_passed_full_eval_of_this_exact_manifest(env: Env) -> None:
    c, h = env.client, env.manager
    env.release("rel-a", passed=None)

    def refused() -> str:
        body = error(c.post("/v1/releases/rel-a/promote", json={"reason": "go"}, headers=h), 409)
        assert body["code"] == "promote_refused"
        return str(body["message"])

    assert "no passing eval (not run)" in refused()
    runs = env.svc.eval_runs
    m = manifest("rel-a")
    # A subset alone is named as such, in the refusal and in what GET shows.
    env.svc.record_eval(gate_report(m, runs=runs, cases=("c1",)), "ci")
    assert "no passing eval (not run in full: 1 partial eval(s) recorded" in refused()
    shown = c.get("/v1/releases/rel-a", headers=h).json()
    assert "not run in full" in shown["promote_problems"][0]
    env.svc.record_eval(gate_report(m, runs=runs, passed=False), "ci")
    assert "no passing eval (failed)" in refused()
    # A passed subset, and a passed full eval of another manifest under the same id.
    env.svc.record_eval(gate_report(m, runs=runs, cases=("c1",)), "ci")
    other = gate_report(manifest("rel-a", model_route="support-tier2-loops@2026-03"), runs=runs)
    env.svc.store.record_release_eval("rel-a", True, gate.summary(other), "ci")
    assert "not this one" in refused()
    shown = c.get("/v1/releases/rel-a", headers=h).json()
    assert shown["status"] == "evaluated" and shown["promote_problems"]
    assert shown["evals"][0]["matches_manifest"] is False
    assert env.svc.store.rollout(WF) is None and env.history("promote") == []

    # Its own passed full eval: promoted, audited with the caller, the reason and the hash.
    env.svc.record_eval(gate_report(m, runs=runs), "ci")
    resp = c.post("/v1/releases/rel-a/promote", json={"reason": "INC-9 fix ships"}, headers=h)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["status"] == "live" and out["promote_problems"] == []
    assert out["rollout"]["incumbent"] == "rel-a"
    [row] = env.history("promote")
    assert row.actor == "acme/rm-1" and row.reason == "INC-9 fix ships"
    assert row.release_id == "rel-a" and row.data is not None
    assert row.data["manifest_hash"] == Manifest.parse(m).content_hash()
    assert row.data["previous"] is None and row.data["forced_past"] == []
    [entry] = [a for a in out["audit"] if a["action"] == "promote"]
    assert entry["actor"] == "acme/rm-1" and entry["reason"] == "INC-9 fix ships"
    assert entry["from_release"] is None and entry["to_release"] == "rel-a"


def test_rollback_of_the_live_release_is_audited_and_only_the_live_one(env: Env) -> None:
    c, h = env.client, env.manager
    env.release("rel-a")
    env.release("rel-b")
    for rid in ("rel-a", "rel-b"):
        assert (
            c.post(
                f"/v1/releases/{rid}/promote", json={"reason": f"ship {rid}"}, headers=h
            ).status_code
            == 200
        )
    # rel-a is not live: refused, nothing changes.
    body = error(c.post("/v1/releases/rel-a/rollback", json={"reason": "x"}, headers=h), 409)
    assert body["code"] == "release_conflict" and "not live" in body["message"]
    assert env.svc.store.rollout(WF).incumbent == "rel-b"
    assert env.history("rollback") == []

    resp = c.post(
        "/v1/releases/rel-b/rollback",
        json={"reason": "refunds\x00 stuck\n\u202e INC-12"},
        headers=h,
    )
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["status"] == "rolled_back" and out["rollout"]["incumbent"] == "rel-a"
    [row] = env.history("rollback")
    # The reason as the content rule leaves it: no NUL, no line or bidi control, one line.
    assert row.actor == "acme/rm-1"
    assert row.reason == f"refunds{REPLACEMENT} stuck\\u000a\\u202e INC-12"
    assert row.release_id == "rel-a" and row.data == {"previous": None, "from": "rel-b"}
    [entry] = [a for a in out["audit"] if a["action"] == "rollback"]
    assert (entry["from_release"], entry["to_release"]) == ("rel-b", "rel-a")
    assert entry["reason"] == row.reason

    listed = {
        x["release_id"]: x for x in c.get("/v1/releases", headers=env.operator).json()["releases"]
    }
    assert listed["rel-a"]["status"] == "live" and listed["rel-b"]["status"] == "rolled_back"
    assert listed["rel-b"]["last_eval"]["verdict"] == "passed"
    assert listed["rel-b"]["manifest_hash"] == Manifest.parse(manifest("rel-b")).content_hash()
    # A second rollback of rel-b: it is no longer live.
    error(c.post("/v1/releases/rel-b/rollback", json={"reason": "again"}, headers=h), 409)


@pytest.mark.parametrize("when", ["before_its_read", "after_its_read"])
def test_a_rollback_never_rolls_back_a_release_promoted_meanwhile(env: Env, when: str) -> None:
    """That the release is live is checked on the very rollout row the service's compare-and-set
    expects: a promote of another release before the service reads the rollout is a conflict
    (the check), and so is one after (the compare-and-set); never a rollback of the release
    promoted in between."""
    env.release("rel-a")
    env.release("rel-b")
    env.svc.promote("rel-a", "ci", "ship")
    store = env.svc.store
    hook = "rollout" if when == "before_its_read" else "release_history"

    class PromoteMeanwhile:
        done = False

        def __getattr__(self, name: str) -> Any:
            attr = getattr(store, name)
            if name != hook or self.done:
                return attr

            def meanwhile(*args: Any, **kwargs: Any) -> Any:
                if when == "before_its_read":
                    env.svc.promote("rel-b", "someone", "meanwhile")
                out = attr(*args, **kwargs)
                if when == "after_its_read":
                    env.svc.promote("rel-b", "someone", "meanwhile")
                self.done = True
                return out

            return meanwhile

    guarded = ReleaseService(api_releases._LiveOnly(PromoteMeanwhile(), "rel-a"), eval_runs=1)
    with pytest.raises(ReleaseConflict):
        guarded.rollback(WF, "acme/rm-1", "INC-13")
    assert store.rollout(WF).incumbent == "rel-b"
    assert env.history("rollback") == []


def test_show_has_eval_reports_per_suite_and_hides_other_tenants_pins(env: Env) -> None:
    env.release("rel-a", passed=False)
    env.svc.store.set_tenant_release(
        "globex", WF, actor="ops", release_id="rel-a", reason="pin globex"
    )
    env.svc.store.set_tenant_release(TENANT, WF, actor="ops", release_id="rel-a", reason="pin acme")
    out = env.client.get("/v1/releases/rel-a", headers=env.operator).json()
    assert out["manifest"]["release_id"] == "rel-a" and out["eval_status"] == "failed"
    [report] = out["evals"]
    assert report["verdict"] == "failed" and report["full"] is True
    assert report["matches_manifest"] is True and report["runs_per_case"] == env.svc.eval_runs
    suites = {s["suite"]: s for s in report["suites"]}
    assert set(suites) == {"golden-refund@2", "safety@1"}
    assert all(s["gate"] == "fail" and s["failed"] == ["c2"] for s in suites.values())
    reasons = [a["reason"] for a in out["audit"]]
    assert "pin acme" in reasons and "pin globex" not in reasons
    assert "globex" not in env.client.get("/v1/releases/rel-a", headers=env.operator).text


def test_the_document_describes_the_release_routes(env: Env) -> None:
    spec = env.client.get("/openapi.json").json()
    paths = spec["paths"]
    assert set(paths["/v1/releases"]) == {"get"}
    assert set(paths["/v1/releases/{release_id}"]) == {"get"}
    for action in ("promote", "rollback"):
        op = paths[f"/v1/releases/{{release_id}}/{action}"]["post"]
        assert {"200", "401", "403", "404", "409", "422"} <= set(op["responses"])
        assert op["requestBody"]["required"] is True
    reason = spec["components"]["schemas"]["ReasonIn"]
    assert reason["required"] == ["reason"] and reason["properties"]["reason"]["maxLength"] == 1000
    statuses = spec["components"]["schemas"]["ReleaseStatus"]["enum"]
    assert statuses == [s.value for s in ReleaseStatus]


# -- pure parts ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=1200))
def test_a_reason_is_recorded_as_one_clean_bounded_line(raw: str) -> None:
    try:
        out = clean_reason(raw)
    except ValueError:
        assert not raw.strip()
        return
    assert out.strip() and len(out) <= api_releases.REASON_MAX
    assert "\x00" not in out and not any(0xD800 <= ord(ch) <= 0xDFFF for ch in out)
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in out)
    assert not any(ch in out for ch in "\u2028\u2029\u202e\u2066\ufeff")


def _h(i: int, action: str, rid: str | None, **data: Any) -> HistoryRow:
    from datetime import UTC, datetime

    return HistoryRow(i, WF, action, rid, "ci", "", data or None, datetime(2026, 1, 1, tzinfo=UTC))


def test_status_follows_the_rollout_and_the_history() -> None:
    from datetime import UTC, datetime

    def ro(incumbent: str | None, candidate: str | None = None, mode: str = "none") -> RolloutRow:
        return RolloutRow(
            WF, incumbent, candidate, mode, 10, "ci", datetime(2026, 1, 1, tzinfo=UTC)
        )

    assert release_status("a", None, None, []) is ReleaseStatus.DRAFT
    assert release_status("a", "failed", None, []) is ReleaseStatus.EVALUATED
    assert release_status("a", "passed", ro("a"), []) is ReleaseStatus.LIVE
    assert release_status("b", "passed", ro("a", "b", "canary"), []) is ReleaseStatus.CANARY
    assert release_status("b", None, ro("a", "b", "shadow"), []) is ReleaseStatus.SHADOW
    promoted_b = _h(2, "promote", "b", previous="a")
    assert release_status("a", "passed", ro("b"), [promoted_b]) is ReleaseStatus.SUPERSEDED
    back = _h(3, "rollback", "a", previous=None, **{"from": "b"})
    assert release_status("b", "passed", ro("a"), [back, promoted_b]) is ReleaseStatus.ROLLED_BACK
    reverted = _h(4, "auto_revert", "c", canary="c")
    assert release_status("c", "passed", ro("a"), [reverted]) is ReleaseStatus.ROLLED_BACK
