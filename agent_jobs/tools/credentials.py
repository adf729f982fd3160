"""Short-lived, per-tool, per-tenant credentials minted by the executor for one call.

The orchestrator and the model never hold a credential; the executor mints one right before the
call, scoped to one tool and one tenant, expiring in about a minute. A leaked token is therefore
worth one tool for one tenant for one minute.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from agent_jobs.config import Settings, env_name, from_environ, load_settings
from agent_jobs.core.clock import Clock, SystemClock
from agent_jobs.core.errors import AgentJobsError, ConfigError

log = logging.getLogger(__name__)

SECRET_ENV = env_name("tool_secret")
# The embedded mode only (`make demo`, `agent_jobs.testing`): lets one in-process runtime run with
# nothing configured, with a warning. Anywhere else a missing secret stops the process: with a
# public value anyone could mint credentials the business systems accept.
DEV_SECRET = "agent-jobs-dev-tool-secret--not-for-production"
MISSING_SECRET = (
    f"{SECRET_ENV} is not set: set it to 32+ random bytes, the secret the business systems "
    "verify tool credentials with (only the embedded mode has a development default)"
)
MAX_TTL_S = 900
_PREFIX = "ajt1"


@dataclass(frozen=True)
class Credential:
    """A bearer token and what it is good for. The token never appears in a repr or a log."""

    token: str = field(repr=False)
    expires_at: datetime
    scope: str
    # When it was minted: a credential epoch (an operator's revocation) voids every credential
    # minted before it. None: the provider does not say (treated as minted before any epoch).
    issued_at: datetime | None = None


def revoked(credential: Credential, epoch: float | None) -> bool:
    """Whether a credential epoch (epoch seconds; see `ops`) voids this credential."""
    if epoch is None:
        return False
    return credential.issued_at is None or credential.issued_at.timestamp() < epoch


class CredentialProvider(Protocol):
    """Mints a credential for one tool and one tenant, valid for `ttl_s` seconds."""

    def mint(self, tool: str, tenant_id: str, ttl_s: int, *, role: str = "") -> Credential: ...


class CredentialInvalid(AgentJobsError):
    """A presented token is malformed, forged, expired or for another tool or tenant."""

    code = "credential_invalid"


def tool_secret(cfg: Settings) -> str:
    """The secret tool credentials are signed with. Fails closed: outside the embedded mode a
    missing secret is a `ConfigError` naming the setting (a worker checks it at start); in the
    embedded mode the development default, with a warning."""
    if cfg.tool_secret:
        return cfg.tool_secret
    if not cfg.embedded:
        raise ConfigError(MISSING_SECRET)
    log.warning("%s is not set: using the development tool secret (embedded mode)", SECRET_ENV)
    return DEV_SECRET


def scope_of(tool: str, tenant_id: str) -> str:
    return f"tool:{tool} tenant:{tenant_id}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class HmacCredentialProvider:
    """Signs `{tool, tenant, role, scope, iat, exp, jti}` with HMAC-SHA256.

    The service receiving the token verifies it with the shared secret (`verify`), checks the
    scope names its own tool, and refuses it after `exp`. Suitable for first-party services; a
    vault-backed provider can replace it behind the same port.
    """

    def __init__(self, secret: str | bytes, *, clock: Clock | None = None) -> None:
        if not secret:
            raise ValueError("credential secret must not be empty")
        self._key = secret.encode("utf-8") if isinstance(secret, str) else secret
        self._clock = clock or SystemClock()

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, clock: Clock | None = None
    ) -> HmacCredentialProvider:
        """Secret from `AGENT_JOBS_TOOL_SECRET` (read through the settings schema; `environ`
        instead of the process's); see `tool_secret` for when it may be missing."""
        cfg = load_settings() if environ is None else from_environ(environ)
        return cls(tool_secret(cfg), clock=clock)

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest())

    def mint(self, tool: str, tenant_id: str, ttl_s: int, *, role: str = "") -> Credential:
        """A token for `tool` on behalf of `tenant_id`, expiring `ttl_s` seconds from now."""
        if not 0 < ttl_s <= MAX_TTL_S:
            raise ValueError(f"credential ttl must be in (0, {MAX_TTL_S}] seconds, got {ttl_s}")
        now = self._clock.now()
        expires_at = now + timedelta(seconds=ttl_s)
        scope = scope_of(tool, tenant_id)
        claims = {
            "tool": tool,
            "tenant": tenant_id,
            "role": role,
            "scope": scope,
            "iat": int(now.timestamp()),
            "exp": int(expires_at.timestamp()),
            "jti": secrets.token_hex(8),
        }
        payload = _b64(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
        token = f"{_PREFIX}.{payload}.{self._sign(f'{_PREFIX}.{payload}')}"
        return Credential(token=token, expires_at=expires_at, scope=scope, issued_at=now)

    def verify(
        self,
        token: str,
        *,
        tool: str | None = None,
        tenant_id: str | None = None,
        not_before: float | None = None,
    ) -> dict[str, Any]:
        """The token's claims if it is genuine, unexpired, (when given) for this tool/tenant,
        and not minted before `not_before` (a credential epoch, epoch seconds)."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            raise CredentialInvalid("malformed tool credential")
        expected = self._sign(f"{parts[0]}.{parts[1]}")
        if not hmac.compare_digest(expected, parts[2]):
            raise CredentialInvalid("bad signature on tool credential")
        try:
            claims: dict[str, Any] = json.loads(_unb64(parts[1]))
        except ValueError:
            raise CredentialInvalid("unreadable tool credential") from None
        if self._clock.now().timestamp() >= claims.get("exp", 0):
            raise CredentialInvalid("tool credential expired")
        if tool is not None and claims.get("tool") != tool:
            raise CredentialInvalid(f"tool credential is not for tool {tool!r}")
        if tenant_id is not None and claims.get("tenant") != tenant_id:
            raise CredentialInvalid("tool credential is for another tenant")
        # `iat` is whole seconds: a token minted in the epoch's own second is refused too.
        if not_before is not None and claims.get("iat", 0) < int(not_before) + 1:
            raise CredentialInvalid("tool credential was revoked (minted before the epoch)")
        return claims
