"""HTTP adapter (`requests`) and where base URLs come from.

Every base URL is a named setting: an environment variable per system (`AGENT_JOBS_PAYMENTS_URL`,
...) overrides the default held by a `SystemsConfig`, so no endpoint is hard-coded at a call site
and a deployment can point one system elsewhere without touching code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from string import Formatter
from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter as _TransportAdapter
from urllib3.exceptions import NewConnectionError

from agent_jobs.core.errors import ConfigError
from agent_jobs.tools.adapter import (
    AdapterResult,
    Invocation,
    ServiceFailed,
    ServiceRejected,
    TransportFailed,
)

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# The server did not process these; waiting and asking again is the right answer.
_TRANSIENT_4XX = frozenset({408, 429})


@dataclass(frozen=True)
class SystemsConfig:
    """Default base URLs by setting name; the environment variable of the same name wins."""

    defaults: Mapping[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None

    def base_url(self, setting: str) -> str:
        env = os.environ if self.environ is None else self.environ
        url = env.get(setting) or self.defaults.get(setting)
        if not url:
            raise ConfigError(f"no base URL: set the environment variable {setting}")
        return url.rstrip("/")


def _refused_before_send(exc: BaseException) -> bool:
    """Whether a connection error happened while connecting, i.e. no byte of the request left."""
    seen: set[int] = set()
    stack: list[Any] = [exc]
    while stack:
        e = stack.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, NewConnectionError):
            return True
        stack.extend([*e.args, getattr(e, "reason", None), e.__cause__, e.__context__])
    return False


def _error_of(resp: requests.Response) -> tuple[str, str]:
    """`{"error": {"code", "message"}}` when the service speaks the contract, else `http_<n>`."""
    try:
        body = resp.json()
        err = body["error"]
        return str(err["code"]), str(err.get("message", ""))
    except (ValueError, KeyError, TypeError):
        return f"http_{resp.status_code}", resp.reason or ""


class HttpAdapter:
    """One HTTP request per attempt, with the credential, idempotency key and timeouts attached.

    Arguments named in `path_template` (e.g. `/orders/{order_id}`) fill the path, URL-quoted; the
    rest go in the query string (GET, DELETE) or the JSON body (POST, PUT, PATCH). The read timeout
    is the tool's timeout; the connect timeout is short because a refused or silent connect is
    the one failure that provably sent nothing.
    """

    def __init__(
        self,
        method: str,
        path_template: str,
        base_url_setting: str,
        *,
        config: SystemsConfig | None = None,
        session: requests.Session | None = None,
        connect_timeout_s: float = 1.0,
    ) -> None:
        self.method = method.upper()
        self.path_template = path_template
        self.base_url_setting = base_url_setting
        self._config = config or SystemsConfig()
        self._path_fields = [f for _, f, _, _ in Formatter().parse(path_template) if f]
        self._connect_timeout_s = connect_timeout_s
        self._session = session or self._new_session()

    @staticmethod
    def _new_session() -> requests.Session:
        # requests' default already makes no retries; it is spelled out because a transport-level
        # retry of a POST is exactly the blind retry this design exists to prevent.
        s = requests.Session()
        transport = _TransportAdapter(max_retries=0)
        s.mount("http://", transport)
        s.mount("https://", transport)
        return s

    def _request_parts(self, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        values = {name: str(args[name]) for name in self._path_fields}
        # URL libraries collapse dot segments, so `..` would silently reach another endpoint.
        if any(v in ("", ".", "..") for v in values.values()):
            raise ServiceRejected("invalid_path_argument", "empty or dot-segment path argument")
        path = self.path_template.format(**{k: quote(v, safe="") for k, v in values.items()})
        rest = {k: v for k, v in args.items() if k not in self._path_fields}
        return path, rest

    def invoke(self, inv: Invocation) -> AdapterResult:
        # Failures before anything is sent are definitive: for a write, "unknown" would send the
        # task to reconcile an effect that provably never started.
        try:
            path, rest = self._request_parts(inv.args)
            url = self._config.base_url(self.base_url_setting) + path
        except ConfigError as e:
            raise ServiceRejected("tool_misconfigured", str(e)) from e
        except KeyError as e:
            raise ServiceRejected("invalid_path_argument", f"missing {e}") from e
        headers = {"Authorization": f"Bearer {inv.credential.token}", "Accept": "application/json"}
        if inv.idempotency_key is not None:
            headers["Idempotency-Key"] = inv.idempotency_key
        if inv.trace_id:
            headers["X-Trace-Id"] = inv.trace_id
        in_body = self.method in _BODY_METHODS
        try:
            resp = self._session.request(
                self.method,
                url,
                params=None if in_body else rest,
                json=rest if in_body else None,
                headers=headers,
                timeout=(min(self._connect_timeout_s, inv.timeout_s), inv.timeout_s),
                allow_redirects=False,
            )
        except requests.ConnectTimeout as e:
            raise TransportFailed("timeout", "connect timed out", sent=False) from e
        except requests.Timeout as e:
            msg = f"no response within {inv.timeout_s}s"
            raise TransportFailed("timeout", msg, sent=True) from e
        except requests.ConnectionError as e:
            sent = not _refused_before_send(e)
            raise TransportFailed("connection_error", type(e).__name__, sent=sent) from e
        except requests.RequestException as e:
            raise TransportFailed("connection_error", type(e).__name__, sent=True) from e
        return self._classify(resp)

    @staticmethod
    def _classify(resp: requests.Response) -> AdapterResult:
        status = resp.status_code
        if 200 <= status < 300:
            if not resp.content:
                return AdapterResult(value=None, status_code=status)
            try:
                return AdapterResult(value=resp.json(), status_code=status)
            except ValueError as e:
                # It said yes but we cannot read what it did: for a write, that is not "ok".
                msg = "2xx body is not JSON"
                raise ServiceFailed("invalid_response", msg, status=status) from e
        code, message = _error_of(resp)
        if 400 <= status < 500:
            raise ServiceRejected(code, message, status=status, transient=status in _TRANSIENT_4XX)
        # 5xx, and 3xx (redirects are not followed): the service may have acted.
        raise ServiceFailed(code, message, status=status)
