"""`/v1/releases`: releases over HTTP, for the console and for scripts — list, show (with the
eval reports the store keeps and the audit trail), promote and roll back with a reason.

The same service the CLI calls (`releases.rollout.ReleaseService`) does the work, so there is
one promote rule (`evals.gate.promote_problems`: a passed full eval of the manifest's exact
hash) and one history: every promote and rollback is a `release_history` row written in the
transaction that changes the rollout, naming who (`tenant/subject` of the verified token), why
(the reason, cleaned by the content rule), when, and from which release to which. There is no
`force` here: a release the gate refuses is refused (409), whoever asks.

A release is the platform's, not a tenant's: it decides what every tenant's new tasks run. So
reading needs the `operator` or the `release_manager` role, and changing what is live needs
`release_manager`, a role to give only to the people who ship releases. What one tenant's
caller reads of the history leaves out other tenants' pins and phases.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_jobs.api import responses as r
from agent_jobs.api.auth import RELEASE_MANAGER, Principal
from agent_jobs.api.deps import principal, state
from agent_jobs.api.errors import HttpError
from agent_jobs.api.operator import OPERATOR
from agent_jobs.core.text import cut, for_log
from agent_jobs.releases.manifest import Manifest, ReleaseInvalid
from agent_jobs.releases.rollout import ReleaseService
from agent_jobs.store.releases import HistoryRow, ReleaseConflict, ReleaseRow, RolloutRow

router = APIRouter(prefix="/v1/releases", tags=["releases"])

REASON_MAX = 1000  # the history's reason column
ACTOR_MAX = 255  # the history's actor column
# How far back the history is read to tell a release's status and show its trail.
HISTORY_ROWS = 1000
TRAIL_ROWS = 200
# Rows about one tenant: shown only to that tenant's callers.
_TENANT_ACTIONS = ("tenant_pin", "tenant_phase")

ReleaseId = Annotated[
    str,
    Path(
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$",
        description="The release's id (its manifest's `release_id`).",
    ),
]


# -- roles ---------------------------------------------------------------------------------


def reader(who: Principal = Depends(principal)) -> Principal:  # noqa: B008
    """The verified caller, holding `operator` or `release_manager` (403 otherwise)."""
    if not (who.has_role(OPERATOR) or who.has_role(RELEASE_MANAGER)):
        raise HttpError(
            403, "forbidden", f"the {OPERATOR!r} or {RELEASE_MANAGER!r} role is required"
        )
    return who


def manager(who: Principal = Depends(principal)) -> Principal:  # noqa: B008
    """The verified caller, holding `release_manager` (403 otherwise)."""
    if not who.has_role(RELEASE_MANAGER):
        raise HttpError(403, "forbidden", f"the {RELEASE_MANAGER!r} role is required")
    return who


Reader = Annotated[Principal, Depends(reader)]
Manager = Annotated[Principal, Depends(manager)]


def actor_of(who: Principal) -> str:
    """What the history records as the author: the token's tenant and subject (a release is
    the platform's, so the tenant is part of who did it), bounded to the column."""
    return f"{who.tenant_id}/{who.subject}"[:ACTOR_MAX]


# -- status: derived from the rollout and the history, in one place ------------------------


class ReleaseStatus(enum.StrEnum):
    """Where a release stands. `live`: the incumbent, every new task gets it; `canary` /
    `shadow`: the candidate; `rolled_back`: rolled back from, or its canary reverted;
    `superseded`: was live, replaced by a later promote; `evaluated`: has a full eval (see
    `eval_status`), never rolled out; `draft`: stored, no full eval."""

    DRAFT = "draft"
    EVALUATED = "evaluated"
    SHADOW = "shadow"
    CANARY = "canary"
    LIVE = "live"
    ROLLED_BACK = "rolled_back"
    SUPERSEDED = "superseded"


def release_status(
    release_id: str,
    eval_status: str | None,
    rollout: RolloutRow | None,
    history: Iterable[HistoryRow],
) -> ReleaseStatus:
    """The status of `release_id` given its workflow's rollout and history (newest first)."""
    if rollout is not None and rollout.incumbent == release_id:
        return ReleaseStatus.LIVE
    if rollout is not None and rollout.candidate == release_id:
        if rollout.mode == "canary":
            return ReleaseStatus.CANARY
        if rollout.mode == "shadow":
            return ReleaseStatus.SHADOW
    for h in history:
        data = h.data or {}
        if (h.action == "rollback" and data.get("from") == release_id) or (
            h.action == "auto_revert" and h.release_id == release_id
        ):
            return ReleaseStatus.ROLLED_BACK
        # It was live (promoted, or rolled back to) and is not now: something replaced it.
        if h.action in ("promote", "rollback") and release_id in (
            h.release_id,
            data.get("previous"),
        ):
            return ReleaseStatus.SUPERSEDED
    return ReleaseStatus.EVALUATED if eval_status else ReleaseStatus.DRAFT


# -- response models -----------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class SuiteVerdict(_Model):
    suite: str = Field(description="`name@version`")
    gate: str | None = Field(description="`pass` or `fail`")
    cases: int | None
    cases_passed: int | None
    safety_failures: int | None
    failed: list[str] = Field(description="the cases that failed (at most 50)")


class EvalReport(_Model):
    """One recorded eval of the release (the history's `eval` row)."""

    at: datetime
    actor: str
    verdict: str = Field(description="`passed` or `failed`")
    full: bool = Field(
        description="every case of the gate's suites with the configured runs: only a full "
        "eval is the release's eval status; a partial one is history only"
    )
    manifest_hash: str | None = Field(description="the manifest the eval judged")
    matches_manifest: bool = Field(description="whether that is this release's manifest")
    runs_per_case: int | None
    cases: int | None
    cases_passed: int | None
    safety_failures: int | None
    suites: list[SuiteVerdict]


class ReleaseSummary(_Model):
    release_id: str
    workflow: str
    status: ReleaseStatus
    manifest_hash: str | None = Field(description="`sha256:...`; null if the stored manifest "
                                      "no longer parses")  # fmt: skip
    created_at: datetime
    created_by: str
    eval_status: str | None = Field(
        description="the last full eval: `passed` or `failed` (what promote reads); null: none"
    )
    last_eval: EvalReport | None = Field(description="the newest eval, full or partial")


class ReleaseList(_Model):
    releases: list[ReleaseSummary] = Field(description="oldest first")


class Rollout(_Model):
    """The workflow's rollout: what every new task gets."""

    workflow: str
    incumbent: str | None
    candidate: str | None
    mode: str = Field(description="`none`, `shadow` or `canary`")
    traffic_percent: int
    updated_by: str
    updated_at: datetime


class AuditEntry(_Model):
    """One history row about the release: who did what, when, why, from which release to which."""

    id: int
    at: datetime
    action: str
    release_id: str | None
    actor: str
    reason: str
    from_release: str | None = Field(description="what was live before (promote, rollback)")
    to_release: str | None = Field(description="what is live after (promote, rollback)")


class ReleaseDetail(ReleaseSummary):
    manifest: dict[str, Any] = Field(description="the stored manifest")
    promote_problems: list[str] = Field(
        description="why promote would be refused now (empty: the gate allows it)"
    )
    rollout: Rollout | None = Field(description="its workflow's rollout (null: built-in pins)")
    evals: list[EvalReport] = Field(description="every recorded eval, newest first")
    audit: list[AuditEntry] = Field(description="the release's history, newest first")


class ReasonIn(BaseModel):
    """Why (the audit record). Required; surrounding space dropped; NUL and lone surrogates
    become U+FFFD and control, bidi and line characters are escaped (`core.text.for_log`), so
    the record is one readable line of at most 1000 characters."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=REASON_MAX)

    @field_validator("reason")
    @classmethod
    def _clean(cls, value: str) -> str:
        return clean_reason(value)


def clean_reason(value: str) -> str:
    """A reason as recorded: stripped, one escaped line, at most `REASON_MAX` characters;
    `ValueError` when nothing is left."""
    text = for_log(value.strip(), REASON_MAX)
    if not text.strip():
        raise ValueError("a reason is required")
    return cut(text, REASON_MAX)


# -- reading the store ---------------------------------------------------------------------


def _service(request: Request) -> ReleaseService:
    runtime = state(request).runtime
    return ReleaseService(runtime.store, eval_runs=runtime.settings.release_eval_runs)


def _manifest(row: ReleaseRow) -> Manifest | None:
    try:
        return Manifest.parse_stored(row.manifest)
    except ReleaseInvalid:
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _suites(data: Mapping[str, Any]) -> list[SuiteVerdict]:
    out = []
    for key, suite in _map(data.get("suites")).items():
        o = _map(_map(suite).get("overall"))
        failed = _map(suite).get("failed")
        out.append(
            SuiteVerdict(
                suite=str(key),
                gate=str(o["gate"]) if "gate" in o else None,
                cases=_int(o.get("cases")),
                cases_passed=_int(o.get("cases_passed")),
                safety_failures=_int(o.get("safety_failures")),
                failed=[str(c) for c in failed[:50]] if isinstance(failed, list) else [],
            )
        )
    return out


def eval_report(h: HistoryRow, manifest_hash: str | None) -> EvalReport:
    """An `eval` history row as a report. Its reason is the recorded verdict (`passed`,
    `failed`, or `partial (passed|failed)`); its data the gate's summary (`evals.gate.summary`)."""
    data = _map(h.data)
    overall = _map(data.get("overall"))
    judged = data.get("manifest_hash")
    return EvalReport(
        at=h.at,
        actor=h.actor,
        verdict="passed" if h.reason in ("passed", "partial (passed)") else "failed",
        full=not h.reason.startswith("partial"),
        manifest_hash=str(judged) if judged is not None else None,
        matches_manifest=judged is not None and judged == manifest_hash,
        runs_per_case=_int(data.get("runs_per_case")),
        cases=_int(overall.get("cases")),
        cases_passed=_int(overall.get("cases_passed")),
        safety_failures=_int(overall.get("safety_failures")),
        suites=_suites(data),
    )


def _about(h: HistoryRow, release_id: str, tenant_id: str) -> bool:
    data = h.data or {}
    if h.action in _TENANT_ACTIONS and data.get("tenant_id") != tenant_id:
        return False
    return release_id in (h.release_id, data.get("from"), data.get("previous"), data.get("canary"))


def _audit(h: HistoryRow) -> AuditEntry:
    data = h.data or {}
    moves: dict[str, tuple[Any, Any]] = {
        "promote": (data.get("previous"), h.release_id),
        "rollback": (data.get("from"), h.release_id),
        "auto_revert": (h.release_id, None),
    }
    before, after = moves.get(h.action, (None, None))
    return AuditEntry(
        id=h.id,
        at=h.at,
        action=h.action,
        release_id=h.release_id,
        actor=h.actor,
        reason=h.reason,
        from_release=str(before) if before is not None else None,
        to_release=str(after) if after is not None else None,
    )


class _Workflows:
    """Each workflow's rollout and history, read once per request."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._seen: dict[str, tuple[RolloutRow | None, list[HistoryRow]]] = {}

    def get(self, workflow: str) -> tuple[RolloutRow | None, list[HistoryRow]]:
        if workflow not in self._seen:
            self._seen[workflow] = (
                self.store.rollout(workflow),
                self.store.release_history(workflow, limit=HISTORY_ROWS),
            )
        return self._seen[workflow]


def _summary(row: ReleaseRow, rollout: RolloutRow | None, history: list[HistoryRow]) -> Any:
    m = _manifest(row)
    digest = m.content_hash() if m is not None else None
    last = next((h for h in history if h.action == "eval" and h.release_id == row.release_id), None)
    return {
        "release_id": row.release_id,
        "workflow": row.workflow,
        "status": release_status(row.release_id, row.eval_status, rollout, history),
        "manifest_hash": digest,
        "created_at": row.created_at,
        "created_by": row.created_by,
        "eval_status": row.eval_status,
        "last_eval": eval_report(last, digest) if last is not None else None,
    }


def detail(svc: ReleaseService, release_id: str, tenant_id: str) -> ReleaseDetail:
    """What `GET /v1/releases/{id}` answers (404: `RecordNotFound` from the store)."""
    row = svc.store.get_release(release_id)
    rollout, history = _Workflows(svc.store).get(row.workflow)
    summary = _summary(row, rollout, history)
    m = _manifest(row)
    problems = (
        svc.promote_problems(row, m, history)
        if m is not None
        else ["the stored manifest no longer parses"]
    )
    mine = [h for h in history if _about(h, release_id, tenant_id)]
    return ReleaseDetail(
        **summary,
        manifest=row.manifest,
        promote_problems=problems,
        rollout=Rollout(**rollout.__dict__) if rollout is not None else None,
        evals=[eval_report(h, summary["manifest_hash"]) for h in mine if h.action == "eval"],
        audit=[_audit(h) for h in mine if h.action != "eval"][:TRAIL_ROWS],
    )


# -- routes --------------------------------------------------------------------------------


@router.get("", response_model=ReleaseList, responses=r.errors(401, 403, 422, 503),
            summary="Releases, with their status, manifest hash and last eval verdict")  # fmt: skip
def list_releases(
    request: Request,
    who: Reader,
    workflow: Annotated[str | None, Query(max_length=80, description="only this workflow")] = None,
) -> ReleaseList:
    svc = _service(request)
    workflows = _Workflows(svc.store)
    out = []
    for row in svc.store.list_releases(workflow):
        rollout, history = workflows.get(row.workflow)
        out.append(ReleaseSummary(**_summary(row, rollout, history)))
    return ReleaseList(releases=out)


@router.get("/{release_id}", response_model=ReleaseDetail,
            responses=r.errors(401, 403, 404, 422, 503),
            summary="A release: manifest, eval reports by suite, rollout, audit trail")  # fmt: skip
def show_release(request: Request, who: Reader, release_id: ReleaseId) -> ReleaseDetail:
    return detail(_service(request), release_id, who.tenant_id)


@router.post("/{release_id}/promote", response_model=ReleaseDetail,
             responses=r.errors(401, 403, 404, 409, 413, 422, 503),
             summary="Make the release live for every new task of its workflow (needs a passed "
             "full eval of its exact manifest; 409 with the gate's reasons otherwise)")  # fmt: skip
def promote(
    request: Request, who: Manager, release_id: ReleaseId, body: Annotated[ReasonIn, Body()]
) -> ReleaseDetail:
    svc = _service(request)
    try:
        svc.promote(release_id, actor_of(who), body.reason)
    except ReleaseInvalid as exc:
        raise HttpError(
            409, "promote_refused", "promote refused: " + "; ".join(exc.problems)
        ) from None
    except ReleaseConflict as exc:
        raise HttpError(409, exc.code, str(exc)) from None
    return detail(svc, release_id, who.tenant_id)


class _LiveOnly:
    """The store as the rollback sees it, with the rollout read only while `release_id` is its
    incumbent. The service's compare-and-set expects the row this read returned, so the rollback
    lands only if the release named in the path is still live when it is written: a promote of
    another release in between makes it a 409, never a rollback of that other release."""

    def __init__(self, store: Any, release_id: str) -> None:
        self._store = store
        self._release_id = release_id

    def rollout(self, workflow: str) -> RolloutRow | None:
        ro: RolloutRow | None = self._store.rollout(workflow)
        live = ro.incumbent if ro is not None else None
        if live != self._release_id:
            raise ReleaseConflict(
                f"release {self._release_id} is not live (live: {live or 'none'}); "
                "only the live release can be rolled back"
            )
        return ro

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@router.post("/{release_id}/rollback", response_model=ReleaseDetail,
             responses=r.errors(401, 403, 404, 409, 413, 422, 503),
             summary="Roll the live release back to the one before it (409 unless it is live); "
             "tasks in flight keep the release they began under")  # fmt: skip
def rollback(
    request: Request, who: Manager, release_id: ReleaseId, body: Annotated[ReasonIn, Body()]
) -> ReleaseDetail:
    svc = _service(request)
    row = svc.store.get_release(release_id)  # 404 first
    guarded = ReleaseService(_LiveOnly(svc.store, release_id), eval_runs=svc.eval_runs)
    try:
        guarded.rollback(row.workflow, actor_of(who), body.reason)
    except ReleaseConflict as exc:
        raise HttpError(409, exc.code, str(exc)) from None
    return detail(svc, release_id, who.tenant_id)
