"""HTTP adapter (`requests`) and where base URLs come from.

Every base URL is a named setting: an environment variable per system (`AGENT_JOBS_PAYMENTS_URL`,
...) overrides the default held by a `SystemsConfig`, so no endpoint is hard-coded at a call site
and a deployment can point one system elsewhere without touching code.

What a business system answers is data, and the adapter is where it enters (`core.text`): a body
is read up to `MAX_RESPONSE_BYTES` within the tool's timeout, must be a JSON object (by
`Content-Type` and by content; `NaN` and `Infinity` refused, since Postgres `jsonb` cannot hold
them), and every string in it, keys included, is cleaned of NUL and lone surrogates. Whatever
fails there is a classified `ServiceFailed`, never an exception of the JSON decoder.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from string import Formatter
from typing import Any, Literal, NoReturn
from urllib.parse import quote, urlsplit

import requests
from requests.adapters import HTTPAdapter as _TransportAdapter
from urllib3 import exceptions as urllib3_exceptions
from urllib3.exceptions import NewConnectionError

from agent_jobs.core.clock import Clock, SystemClock
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.text import clean_json, clean_text, cut
from agent_jobs.tools.adapter import (
    AdapterResult,
    Invocation,
    ServiceFailed,
    ServiceRejected,
    ServiceThrottled,
    TransportFailed,
)
from agent_jobs.tools.throttle import retry_after_of

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# The server did not process these; waiting and asking again is the right answer.
_TRANSIENT_4XX = frozenset({408})
# A business answer (an order, a list of payments, a policy document) is kilobytes; a megabyte
# is already far more than a task's state should carry.
MAX_RESPONSE_BYTES = 1024 * 1024
# An error body is read only for its `{"error": {code, message}}`.
MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_CODE_CHARS = 100
MAX_MESSAGE_CHARS = 500
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class SystemsConfig:
    """Base URLs by setting name: `environ` (the values configured, e.g. from the settings
    schema) wins over `defaults`. Nothing here reads the process environment."""

    defaults: Mapping[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None

    def base_url(self, setting: str) -> str:
        env = self.environ or {}
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


def _error_of(status: int, reason: str, body: bytes | None) -> tuple[str, str]:
    """`{"error": {"code", "message"}}` when the service speaks the contract, else `http_<n>`;
    both cleaned and cut, since they travel into the task's state and events."""
    code, message = f"http_{status}", reason or ""
    if body:
        try:
            err = _loads(body)["error"]
            code, message = str(err["code"]), str(err.get("message", ""))
        except (ValueError, KeyError, TypeError, RecursionError):
            pass
    return cut(clean_text(code), MAX_CODE_CHARS), cut(clean_text(message), MAX_MESSAGE_CHARS)


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number this system can store")


def _loads(body: bytes) -> Any:
    # json.loads detects UTF-8/16/32; undecodable bytes raise UnicodeDecodeError (a ValueError).
    return json.loads(body, parse_constant=_refuse_constant)


def _is_json(content_type: str | None) -> bool:
    """No `Content-Type` is given the benefit of the doubt; the body is still parsed strictly."""
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


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
        clock: Clock | None = None,
    ) -> None:
        self.method = method.upper()
        self.path_template = path_template
        self.base_url_setting = base_url_setting
        self._config = config or SystemsConfig()
        self._path_fields = [f for _, f, _, _ in Formatter().parse(path_template) if f]
        self._connect_timeout_s = connect_timeout_s
        self._clock: Clock = clock or SystemClock()
        self._session = session or self._new_session()
        self._environment: dict[str, dict[str, Any]] = {}

    @staticmethod
    def _new_session() -> requests.Session:
        # requests' default already makes no retries; it is spelled out because a transport-level
        # retry of a POST is exactly the blind retry this design exists to prevent.
        s = requests.Session()
        transport = _TransportAdapter(max_retries=0)
        s.mount("http://", transport)
        s.mount("https://", transport)
        # Not requests' own reading of the environment on every call (`trust_env`): it scans
        # every variable for proxies twice a request (about a third of a millisecond of CPU),
        # and a `~/.netrc` entry for the system's host would replace the tool's bearer
        # credential with basic auth. The proxies and CA bundle it would find are read once
        # per origin instead (`_settings`).
        s.trust_env = False
        return s

    def _settings(self, url: str) -> dict[str, Any]:
        """What requests' `trust_env` gives a request to `url` from the environment, less
        `.netrc`: the proxies for its origin (`*_PROXY`, `NO_PROXY`) and the CA bundle
        (`REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`). Read on the origin's first request."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        found = self._environment.get(origin)
        if found is None:
            bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
            found = self._environment[origin] = {
                "proxies": requests.utils.get_environ_proxies(origin),
                "verify": bundle or True,
            }
        return found

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
        headers = {
            "Authorization": f"Bearer {inv.credential.token}",
            "Accept": "application/json",
            # Compressed bodies could expand past any limit before it is checked.
            "Accept-Encoding": "identity",
        }
        if inv.idempotency_key is not None:
            headers["Idempotency-Key"] = inv.idempotency_key
        if inv.trace_id:
            headers["X-Trace-Id"] = inv.trace_id
        in_body = self.method in _BODY_METHODS
        # The read timeout bounds each wait for bytes; the deadline bounds the whole body, so a
        # service trickling a byte a second cannot hold a worker for the length of the body.
        deadline = time.monotonic() + inv.timeout_s
        try:
            resp = self._session.request(
                self.method,
                url,
                params=None if in_body else rest,
                json=rest if in_body else None,
                headers=headers,
                timeout=(min(self._connect_timeout_s, inv.timeout_s), inv.timeout_s),
                allow_redirects=False,
                stream=True,
                **self._settings(url),
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
        try:
            return self._classify(resp, deadline)
        finally:
            resp.close()

    def _classify(self, resp: requests.Response, deadline: float) -> AdapterResult:
        status = resp.status_code
        if 200 <= status < 300:
            # It said yes; whatever stops us reading what it did is, for a write, not "ok".
            body = _read_body(resp, deadline, MAX_RESPONSE_BYTES)
            return AdapterResult(value=_decode(resp, body), status_code=status)
        try:
            err_body: bytes | None = _read_body(resp, deadline, MAX_ERROR_BODY_BYTES)
        except (ServiceFailed, TransportFailed):
            err_body = None  # the status alone decides; the code falls back to http_<n>
        code, message = _error_of(status, resp.reason or "", err_body)
        if status == 429 or (status == 503 and "Retry-After" in resp.headers):
            # Refused before applying anything, and told when to come back.
            retry_after = retry_after_of(resp.headers, self._clock.now())
            raise ServiceThrottled(code, message, retry_after_s=retry_after, status=status)
        if 400 <= status < 500:
            raise ServiceRejected(code, message, status=status, transient=status in _TRANSIENT_4XX)
        # 5xx, and 3xx (redirects are not followed): the service may have acted.
        raise ServiceFailed(code, message, status=status)


def _read_body(resp: requests.Response, deadline: float, limit: int) -> bytes:
    """At most `limit` bytes of the body, read before `deadline`; more is `response_too_large`."""
    status = resp.status_code
    declared = resp.headers.get("Content-Length", "")
    if declared.strip().isdigit() and int(declared) > limit:
        raise ServiceFailed(
            "response_too_large",
            f"declared {declared} bytes, more than {limit}",
            status=status,
            transient=False,
        )
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            if time.monotonic() > deadline:
                raise TransportFailed("timeout", "the body did not arrive in time", sent=True)
            chunk = resp.raw.read1(_READ_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ServiceFailed(
                    "response_too_large", f"more than {limit} bytes", status=status, transient=False
                )
            chunks.append(chunk)
    except requests.RequestException as e:
        raise TransportFailed("connection_error", type(e).__name__, sent=True) from e
    except (OSError, urllib3_exceptions.HTTPError) as e:
        timed_out = isinstance(e, (TimeoutError, urllib3_exceptions.TimeoutError))
        reason: Literal["timeout", "connection_error"] = (
            "timeout" if timed_out else "connection_error"
        )
        raise TransportFailed(reason, type(e).__name__, sent=True) from e
    return b"".join(chunks)


def _decode(resp: requests.Response, body: bytes) -> Any:
    """A 2xx body as a cleaned JSON object (None when empty)."""
    status = resp.status_code
    if not body:
        return None
    content_type = resp.headers.get("Content-Type")
    if not _is_json(content_type):
        msg = f"2xx content type {cut(clean_text(content_type or ''), 100)!r} is not JSON"
        raise ServiceFailed("invalid_response", msg, status=status, transient=False)
    try:
        value = _loads(body)
    except (ValueError, RecursionError) as e:
        msg = f"2xx body is not JSON: {type(e).__name__}"
        raise ServiceFailed("invalid_response", msg, status=status, transient=False) from e
    if not isinstance(value, dict):
        msg = f"2xx body is a JSON {type(value).__name__}, not an object"
        raise ServiceFailed("invalid_response", msg, status=status, transient=False)
    try:
        return clean_json(value)
    except RecursionError as e:
        msg = "2xx body is nested too deeply"
        raise ServiceFailed("invalid_response", msg, status=status, transient=False) from e
