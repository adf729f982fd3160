"""One HTTP POST to a webhook endpoint, to an address checked after DNS (`urls.resolve`).

The connection goes to the checked address itself (TLS still verifies the name), so a name
that resolves differently between the check and the connect reaches nothing else. Bounded
connect and read timeouts, at most `MAX_RESPONSE_BYTES` of the answer read, redirects never
followed (a 3xx is a failed attempt).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

from agent_jobs.notify.urls import Resolver, Target, UnsafeUrl, UrlPolicy, parse, resolve

MAX_RESPONSE_BYTES = 64 * 1024
USER_AGENT = "agent-jobs-webhooks/1"


@dataclass(frozen=True)
class Answer:
    status: int | None
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, target: Target, ip: str, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._ip = ip

    def connect(self) -> None:
        self.sock = socket.create_connection((self._ip, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, target: Target, ip: str, timeout: float) -> None:
        super().__init__(
            target.host, target.port, timeout=timeout, context=ssl.create_default_context()
        )
        self._ip = ip

    def connect(self) -> None:
        sock = socket.create_connection((self._ip, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post(
    url: str,
    headers: dict[str, str],
    body: bytes,
    policy: UrlPolicy,
    timeout_s: float,
    *,
    resolver: Resolver = socket.getaddrinfo,
) -> Answer:
    """Send; never raises for what the network or the endpoint does."""
    start = time.monotonic()
    try:
        target = parse(url, policy)
        ip = resolve(target, policy, resolver)[0]
    except UnsafeUrl as exc:
        return Answer(None, f"refused: {exc}", time.monotonic() - start)
    kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    conn = kind(target, ip, timeout_s)
    try:
        conn.request(
            "POST",
            target.path,
            body=body,
            headers={
                **headers,
                "Host": target.host_header,
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
            },
        )
        resp = conn.getresponse()
        resp.read(MAX_RESPONSE_BYTES)
        status = resp.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}"[:300], time.monotonic() - start)
    finally:
        conn.close()
    error = None
    if 300 <= status < 400:
        error = f"HTTP {status}: redirects are not followed"
    elif not 200 <= status < 300:
        error = f"HTTP {status}"
    return Answer(status, error, time.monotonic() - start)
