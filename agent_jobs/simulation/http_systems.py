"""Business systems that answer HTTP in the simulator's own thread: a `requests` transport
(`requests.adapters.BaseAdapter`, the seam requests offers for this) mounted on a session the
product's HTTP adapter is given, so the refund tools and an agent's OpenAPI tools send real
requests (method, path, query, headers, JSON body) and read real responses (status, headers,
body), classified by the product's own code, with no socket and no thread.

A system answers with the HTTP simulator's message types (`agent_jobs.sim.messages`): the same
`Request` its route handlers take and the `Response` they give. Two failures are not answers:
`SystemTimeout` (no answer in time) becomes requests' `ReadTimeout`, and `Unreachable` a refused
connection (nothing left the caller).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import NewConnectionError

from agent_jobs.sim.messages import Request, Response
from agent_jobs.simulation.systems import SystemTimeout

Serve = Callable[[Request], Response]
REASONS = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict", 422: "Unprocessable",
           429: "Too Many Requests", 500: "Internal Server Error", 503: "Unavailable"}  # fmt: skip


class Unreachable(Exception):
    """The system refused the connection: the request never left the caller."""


class InProcess(BaseAdapter):
    """A `requests` transport whose every request is answered by `serve`, in this thread."""

    def __init__(self, serve: Serve) -> None:
        super().__init__()
        self.serve = serve

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **options: Any
    ) -> requests.Response:
        # (`options`: stream, timeout, verify, cert, proxies: nothing here waits or connects.)
        parts = urlsplit(request.url or "")
        body = request.body or b""
        incoming = Request(
            method=str(request.method),
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers={k.lower(): str(v) for k, v in request.headers.items()},
            body=body.encode() if isinstance(body, str) else bytes(body),
        )
        try:
            answer = self.serve(incoming)
        except SystemTimeout as exc:
            raise requests.ReadTimeout(str(exc), request=request) from exc
        except Unreachable as exc:
            # How urllib3 says a connect was refused: the product's adapter reads "not sent".
            refused = NewConnectionError(cast(Any, None), f"connection refused: {exc}")
            raise requests.ConnectionError(refused, request=request) from exc
        return _response(request, answer)

    def close(self) -> None:
        """Nothing is held between requests."""


def _response(request: requests.PreparedRequest, answer: Response) -> requests.Response:
    data = b"" if answer.body is None else json.dumps(answer.body).encode()
    resp = requests.Response()
    resp.status_code = answer.status
    resp.reason = REASONS.get(answer.status, "")
    resp.headers = CaseInsensitiveDict(
        {"Content-Type": "application/json", "Content-Length": str(len(data)), **answer.headers}
    )
    resp.raw = io.BytesIO(data)
    resp.url = request.url or ""
    resp.request = request
    return resp


def session(serve: Serve) -> requests.Session:
    """A session whose every request `serve` answers (no socket, no environment read)."""
    s = requests.Session()
    s.trust_env = False
    transport = InProcess(serve)
    s.mount("http://", transport)
    s.mount("https://", transport)
    return s


def answer(status: int, body: dict[str, Any] | None, **headers: str) -> Response:
    return Response(status, body, dict(headers))


def error(status: int, code: str, message: str = "", **headers: str) -> Response:
    return Response(status, {"error": {"code": code, "message": message}}, dict(headers))


def json_body(request: Request) -> dict[str, Any]:
    try:
        value = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
