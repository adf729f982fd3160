"""A second implementation of the business-systems contract (`agent_jobs/sim/CONTRACT.md`),
written from the contract alone and sharing no code with `agent_jobs.sim`, with harsher faults.

It exists to check that the refund agent depends on the documented contract and nothing else:
refund ids in another format, unknown extra fields on every object (the compatibility rule says
clients ignore them), no admin routes (a production system need not have them), and faults that
are not armed one by one but rolled for every request from a seeded random generator:

- `refunds.create`: commit then drop the connection, commit then answer 500, commit then answer
  only after the caller's timeout, 503 before committing, or throttle before committing
  (`429 rate_limited`, or `503` with `Retry-After`: "not applied, come back later");
- `refunds.get_by_key` (the reconcile lookup) and every read: 503 before doing anything, or a
  throttle before doing anything.

A throttle's `Retry-After` is delta-seconds or an HTTP-date, in turn, so both forms are met.

Each operation rolls from its own generator (seeded from the seed and the operation's name), so
one operation's faults do not depend on how its requests interleave with the others'. The first
request of an operation named in `Harshness.opening` meets that fault rather than a roll, so every
seed exercises the paths the test asserts on (a refund committed and its answer lost, a throttle)
instead of meeting them with high probability only.

The test drives it in process: `world` is loaded by the constructor, and `refunds`, `posts` and
`post_times` show what happened.
"""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

Json = dict[str, Any]

_STOPWORDS = {"a", "an", "and", "the", "of", "or", "to", "is", "in", "for", "on", "be", "it"}
_BODY_FIELDS = {"payment_id", "amount_minor", "currency", "reason"}
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


@dataclass
class Harshness:
    """Probabilities per request; what is left over is served normally."""

    create_drop_after_commit: float = 0.30
    create_error_after_commit: float = 0.15
    create_late_after_commit: float = 0.15  # answered after `late_s`: the caller has given up
    create_error_before_commit: float = 0.10
    create_throttled: float = 0.10  # 429 or 503, with Retry-After, nothing applied
    lookup_error: float = 0.20
    read_error: float = 0.15
    read_throttled: float = 0.05
    retry_after_s: int = 1
    late_s: float = 6.0  # refunds.create's timeout is 5 s
    # the fault the first request of an operation meets, whatever the roll
    opening: dict[str, str] = field(
        default_factory=lambda: {"refunds.create": "drop_after_commit", "orders.get": "throttled"}
    )


@dataclass
class _Ledger:
    orders: dict[str, Json]
    payments: dict[str, Json]
    refunds: list[Json] = field(default_factory=list)
    policies: list[Json] = field(default_factory=list)


class _Fail(Exception):
    def __init__(self, status: int, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.status, self.code = status, code


class StandInSystems:
    """Serve the contract on 127.0.0.1 (a free port) in daemon threads."""

    def __init__(self, world: Json, harshness: Harshness | None = None, seed: int = 7) -> None:
        self.harsh = harshness or Harshness()
        self._seed = seed
        self._rngs: dict[str, random.Random] = {}
        self._lock = threading.Lock()
        self.ledger = _Ledger(
            orders={o["order_id"]: dict(o) for o in world.get("orders", [])},
            payments={p["payment_id"]: dict(p) for p in world.get("payments", [])},
            refunds=[{**r, "order_id": None} for r in world.get("refunds", [])],
            policies=list(world.get("policies", [])),
        )
        for r in self.ledger.refunds:
            r["order_id"] = self.ledger.payments[r["payment_id"]]["order_id"]
        self.posts: list[Json] = []  # every POST /refunds body, with its key and arrival time
        self.faults: list[str] = []
        self._throttles = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                outer._serve(self, "GET")

            def do_POST(self) -> None:
                outer._serve(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StandInSystems:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- what the test reads -----------------------------------------------------------------

    def refunds(self) -> list[Json]:
        with self._lock:
            return [dict(r) for r in self.ledger.refunds]

    # -- serving -------------------------------------------------------------------------------

    def _roll(self, operation: str) -> str:
        h = self.harsh
        with self._lock:
            rng = self._rngs.get(operation)
            if rng is None:
                rng = self._rngs[operation] = random.Random(f"{self._seed}/{operation}")
                if operation in h.opening:
                    return h.opening[operation]
            x = rng.random()
        if operation == "refunds.create":
            for name, p in (
                ("drop_after_commit", h.create_drop_after_commit),
                ("error_after_commit", h.create_error_after_commit),
                ("late_after_commit", h.create_late_after_commit),
                ("error_before_commit", h.create_error_before_commit),
                ("throttled", h.create_throttled),
            ):
                if x < p:
                    return name
                x -= p
            return ""
        limit = h.lookup_error if operation == "refunds.get_by_key" else h.read_error
        if x < limit:
            return "error_before_commit"
        return "throttled" if x < limit + h.read_throttled else ""

    def _record_post(self, key: str, raw: bytes) -> None:
        try:
            body: Any = json.loads(raw or b"null")
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        with self._lock:
            self.posts.append({"key": key, "body": body, "at": time.time()})

    def _throttle(self, req: BaseHTTPRequestHandler) -> None:
        """Refuse before doing anything, saying when to come back, in one of the four ways."""
        with self._lock:
            self._throttles += 1
            n = self._throttles
        after = self.harsh.retry_after_s
        value = str(after) if n % 2 else formatdate(time.time() + after, usegmt=True)
        status = 429 if n % 4 in (1, 2) else 503
        code = "rate_limited" if status == 429 else "overloaded"
        self._write(
            req, status, {"error": {"code": code, "message": "slow down"}}, {"Retry-After": value}
        )

    def _serve(self, req: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(req.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/") if p]
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        length = int(req.headers.get("Content-Length") or 0)
        raw = req.rfile.read(length) if length else b""
        try:
            operation, handler = self._route(method, parts, query)
        except _Fail as f:
            self._write(req, f.status, _error(f))
            return
        if operation == "refunds.create":
            # Every POST that reached the system counts, throttled or refused ones included.
            self._record_post(req.headers.get("Idempotency-Key") or "", raw)
        fault = self._roll(operation) if operation != "healthz" else ""
        if fault:
            self.faults.append(f"{operation}:{fault}")
        if fault == "error_before_commit":
            self._write(req, 503, {"error": {"code": "unavailable", "message": "try later"}})
            return
        if fault == "throttled":
            self._throttle(req)
            return
        try:
            status, body, headers = handler(req, query, raw)
        except _Fail as f:
            status, body, headers = f.status, _error(f), {}
        if fault == "drop_after_commit":
            req.close_connection = True
            req.connection.shutdown(socket.SHUT_RDWR)  # the caller sees the connection end now
            return
        if fault == "error_after_commit":
            self._write(req, 500, {"error": {"code": "internal_error", "message": "oops"}})
            return
        if fault == "late_after_commit":
            time.sleep(self.harsh.late_s)
        self._write(req, status, body, headers)

    def _write(
        self,
        req: BaseHTTPRequestHandler,
        status: int,
        body: Json,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        try:
            req.send_response(status)
            req.send_header("Content-Type", "application/json")
            req.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                req.send_header(k, v)
            req.end_headers()
            req.wfile.write(data)
        except OSError:
            req.close_connection = True  # the caller gave up (the late fault)

    def _route(self, method: str, parts: list[str], query: dict[str, str]) -> tuple[str, Any]:
        match (method, parts):
            case ("GET", ["healthz"]):
                return "healthz", lambda *_: (200, {"ok": True}, {})
            case ("GET", ["orders", order_id]):
                return "orders.get", lambda *_: self._order(order_id)
            case ("GET", ["payments"]):
                return "payments.list", lambda *_: self._payments(query)
            case ("POST", ["refunds"]):
                return "refunds.create", self._create
            case ("GET", ["refunds"]):
                op = "refunds.get_by_key" if "idempotency_key" in query else "refunds.list"
                return op, lambda *_: self._list_refunds(query)
            case ("GET", ["refunds", refund_id]):
                return "refunds.get", lambda *_: self._refund(refund_id)
            case ("GET", ["policies", "search"]):
                return "policies.search", lambda *_: self._search(query)
            case ("GET", ["policies", doc_id]):
                return "policies.get", lambda *_: self._policy(doc_id, None)
            case ("GET", ["policies", doc_id, "versions", n]):
                return "policies.get", lambda *_: self._policy(doc_id, n)
        raise _Fail(404, "not_found", "no such route")

    # -- the contract --------------------------------------------------------------------------

    def _order(self, order_id: str) -> tuple[int, Json, dict[str, str]]:
        with self._lock:
            order = self.ledger.orders.get(order_id)
            if order is None:
                raise _Fail(404, "order_not_found")
            pays = sorted(
                (p for p in self.ledger.payments.values() if p["order_id"] == order_id),
                key=lambda p: (p["created_at"], p["payment_id"]),
            )
            body = {**order, "payment_ids": [p["payment_id"] for p in pays]}
        return 200, {**body, "x_region": "in-south", "x_schema": 9}, {}

    def _refunded(self, payment_id: str) -> int:
        return sum(
            r["amount_minor"]
            for r in self.ledger.refunds
            if r["payment_id"] == payment_id and r["status"] != "failed"
        )

    def _payments(self, query: dict[str, str]) -> tuple[int, Json, dict[str, str]]:
        order_id = query.get("order_id", "").strip()
        if not order_id or set(query) != {"order_id"}:
            raise _Fail(400, "invalid_query")
        with self._lock:
            pays = sorted(
                (p for p in self.ledger.payments.values() if p["order_id"] == order_id),
                key=lambda p: (p["created_at"], p["payment_id"]),
            )
            out = [
                {**p, "refunded_minor": self._refunded(p["payment_id"]), "x_psp": "psp-2"}
                for p in pays
            ]
        return 200, {"payments": out, "x_page": 1}, {}

    def _create(
        self, req: BaseHTTPRequestHandler, _q: dict[str, str], raw: bytes
    ) -> tuple[int, Json, dict[str, str]]:
        key = req.headers.get("Idempotency-Key") or ""
        if not key:
            raise _Fail(400, "idempotency_key_required")
        if not _KEY.match(key):
            raise _Fail(400, "invalid_idempotency_key")
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            raise _Fail(400, "invalid_body") from None
        if not _valid_body(body):
            raise _Fail(400, "invalid_body")
        wanted = (body["payment_id"], body["amount_minor"], body["currency"], body.get("reason"))
        with self._lock:
            for r in self.ledger.refunds:
                if r["idempotency_key"] == key:
                    mine = (r["payment_id"], r["amount_minor"], r["currency"], r["reason"])
                    if mine != wanted:
                        raise _Fail(422, "idempotency_key_reused")
                    return 200, _shown(r), {"Idempotent-Replayed": "true"}
            pay = self._refundable(body)
            refund = {
                "refund_id": f"RF-{uuid.uuid4().hex[:12].upper()}",
                "payment_id": pay["payment_id"],
                "order_id": pay["order_id"],
                "amount_minor": body["amount_minor"],
                "currency": body["currency"],
                "status": "processing",
                "reason": body.get("reason"),
                "idempotency_key": key,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            }
            self.ledger.refunds.append(refund)
        headers = {"Idempotent-Replayed": "false", "Location": f"/refunds/{refund['refund_id']}"}
        return 201, _shown(refund), headers

    def _refundable(self, body: Json) -> Json:
        """Rules 6 to 10 of the contract, in order; the payment if none refuses."""
        pay = self.ledger.payments.get(body["payment_id"])
        if pay is None:
            raise _Fail(404, "payment_not_found")
        if pay["kind"] != "capture" or pay["status"] != "captured":
            raise _Fail(409, "payment_not_captured")
        if pay["currency"] != body["currency"]:
            raise _Fail(422, "currency_mismatch")
        if any(
            r["payment_id"] == pay["payment_id"] and r["status"] != "failed"
            for r in self.ledger.refunds
        ):
            raise _Fail(409, "already_refunded")
        if body["amount_minor"] > pay["amount_minor"] - self._refunded(pay["payment_id"]):
            raise _Fail(422, "exceeds_refundable")
        return pay

    def _list_refunds(self, query: dict[str, str]) -> tuple[int, Json, dict[str, str]]:
        if not set(query) or not set(query) <= {"idempotency_key", "payment_id"}:
            raise _Fail(400, "invalid_query")
        with self._lock:
            found = [
                _shown(r) for r in self.ledger.refunds if all(r[k] == v for k, v in query.items())
            ]
        return 200, {"refunds": found}, {}

    def _refund(self, refund_id: str) -> tuple[int, Json, dict[str, str]]:
        with self._lock:
            for r in self.ledger.refunds:
                if r["refund_id"] == refund_id:
                    return 200, _shown(r), {}
        raise _Fail(404, "refund_not_found")

    def _policy(self, doc_id: str, n: str | None) -> tuple[int, Json, dict[str, str]]:
        versions = sorted(
            (p for p in self.ledger.policies if p["doc_id"] == doc_id), key=lambda p: p["version"]
        )
        if not versions:
            raise _Fail(404, "policy_not_found")
        if n is None:
            return 200, versions[-1], {}
        for p in versions:
            if str(p["version"]) == n:
                return 200, p, {}
        raise _Fail(404, "policy_version_not_found")

    def _search(self, query: dict[str, str]) -> tuple[int, Json, dict[str, str]]:
        q = query.get("q", "").strip()
        if not q or not set(query) <= {"q", "doc_id", "limit"}:
            raise _Fail(400, "invalid_query")
        limit = int(query.get("limit", "5"))
        latest: dict[str, Json] = {}
        for p in self.ledger.policies:
            if p["doc_id"] not in latest or p["version"] > latest[p["doc_id"]]["version"]:
                latest[p["doc_id"]] = p
        words = set(_words(q))
        hits = []
        for doc in latest.values():
            if query.get("doc_id") not in (None, doc["doc_id"]):
                continue
            for chunk in doc["chunks"]:
                text_words = _words(chunk["text"])
                found = words & set(text_words)
                if words and found:
                    score = round(len(found) / len(words), 4)
                    count = sum(w in words for w in text_words)
                    hits.append((-score, -count, doc["doc_id"], doc["version"], chunk, score))
        hits.sort(key=lambda h: (h[0], h[1], h[2], h[3], h[4]["chunk_id"]))
        passages = [
            {"doc_id": d, "version": v, "chunk_id": c["chunk_id"], "text": c["text"], "score": s}
            for _, _, d, v, c, s in hits[:limit]
        ]
        return 200, {"passages": passages}, {}


def _valid_body(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and set(body) <= _BODY_FIELDS
        and {"payment_id", "amount_minor", "currency"} <= set(body)
        and isinstance(body["payment_id"], str)
        and type(body["amount_minor"]) is int
        and body["amount_minor"] > 0
        and isinstance(body["currency"], str)
        and re.fullmatch(r"[A-Z]{3}", body["currency"]) is not None
        and (body.get("reason") is None or isinstance(body.get("reason"), str))
    )


def _words(text: str) -> list[str]:
    out = []
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        if w in _STOPWORDS:
            continue
        out.append(w[:-1] if len(w) > 3 and w.endswith("s") else w)
    return out


def _shown(refund: Json) -> Json:
    return {**refund, "x_settlement": {"batch": None}}


def _error(f: _Fail) -> Json:
    return {"error": {"code": f.code, "message": str(f)}}
