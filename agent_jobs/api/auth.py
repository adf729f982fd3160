"""Bearer tokens (JWT, PyJWT): who is calling, for which tenant, with which roles.

Only algorithms whose key is configured are accepted, and each key is bound to its algorithm:
HS256 verifies with the shared secret (development), RS256 with the configured public key
(production). The algorithm in the token's header only selects among those pairs, so `alg=none`
and the HS/RS confusion (an HS256 token "signed" with the RSA public key as the secret) cannot
select a key: they are refused before any verification. `exp`, `aud`, `iss` and `sub` are
required and checked; the time claims (`exp`, `nbf`, `iat`) must be JSON numbers (PyJWT alone
would take `"exp": "99999999999"` or `true`). The subject must pass `check_subject` and the
tenant (a claim, `tenant` by default) `check_tenant_id`; roles come from a list claim (`roles`).
Any token that fails any of this, however it is malformed, is an `AuthError` (401), never an
exception from the library. Invariant 7: the tenant is taken from the verified token and from
nowhere else.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jwt

from agent_jobs.config import Settings
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.identity import check_subject, check_tenant_id

log = logging.getLogger(__name__)

APPROVER = "approver"
# Changes what every tenant's new tasks run (`/v1/releases/{id}/promote`, `/rollback`).
RELEASE_MANAGER = "release_manager"
_MAX_TOKEN_CHARS = 8192
_TIME_CLAIMS = ("exp", "nbf", "iat")


@dataclass(frozen=True)
class Principal:
    """The verified caller."""

    tenant_id: str
    subject: str
    roles: frozenset[str]

    def has_role(self, role: str) -> bool:
        return role in self.roles


class AuthError(Exception):
    """A token that does not authenticate anyone. `reason` is a stable code for records."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class TokenVerifier:
    """Verifies bearer tokens against the configured keys, audience and issuer."""

    def __init__(self, settings: Settings) -> None:
        self.audience = settings.jwt_audience
        self.issuer = settings.jwt_issuer
        self.tenant_claim = settings.jwt_tenant_claim
        self.roles_claim = settings.jwt_roles_claim
        self.leeway = settings.jwt_leeway_s
        self._keys: dict[str, Any] = {}
        if settings.jwt_secret:
            self._keys["HS256"] = settings.jwt_secret
        public_key = settings.public_key()
        if public_key:
            try:
                self._keys["RS256"] = jwt.algorithms.RSAAlgorithm(
                    jwt.algorithms.RSAAlgorithm.SHA256
                ).prepare_key(public_key)
            except Exception as exc:
                raise ConfigError(
                    f"AGENT_JOBS_JWT_PUBLIC_KEY is not an RSA public key: {exc}"
                ) from None
            if not hasattr(self._keys["RS256"], "verify"):
                raise ConfigError("AGENT_JOBS_JWT_PUBLIC_KEY must be a public key, not private")

    @property
    def algorithms(self) -> list[str]:
        return sorted(self._keys)

    def verify(self, token: str | None) -> Principal:
        """The principal a token names, or `AuthError` with the reason."""
        if not token:
            raise AuthError("missing_token", "a bearer token is required")
        if len(token) > _MAX_TOKEN_CHARS:
            raise AuthError("invalid_token", "the token is too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthError("invalid_token", "the token is not a JWT") from None
        alg = header.get("alg")
        key = self._keys.get(alg) if isinstance(alg, str) else None
        if key is None or not isinstance(alg, str):
            raise AuthError("algorithm_refused", f"tokens signed with {alg!r} are not accepted")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],  # exactly the algorithm this key is bound to
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={
                    "require": ["exp", "aud", "iss", "sub"],
                    "verify_signature": True,
                    "enforce_minimum_key_length": True,
                },
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token_expired", "the token has expired") from None
        except jwt.InvalidAudienceError:
            raise AuthError("wrong_audience", "the token is not for this service") from None
        except jwt.InvalidIssuerError:
            raise AuthError("wrong_issuer", "the token's issuer is not trusted") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError("missing_claim", f"the token has no {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise AuthError("bad_signature", "the token's signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise AuthError("invalid_token", f"the token is invalid: {exc}") from None
        except Exception as exc:
            # A claim shaped so that the library itself trips on it: still just a bad token.
            log.info("token refused: %s while decoding", type(exc).__name__)
            raise AuthError("invalid_token", "the token is invalid") from None
        return self._principal(claims)

    def _principal(self, claims: dict[str, Any]) -> Principal:
        for name in _TIME_CLAIMS:
            if name in claims and not _is_number(claims[name]):
                raise AuthError("invalid_token", f"the token's {name!r} claim must be a number")
        tenant = claims.get(self.tenant_claim)
        if not isinstance(tenant, str):
            raise AuthError("missing_claim", f"the token has no {self.tenant_claim!r} claim")
        try:
            check_tenant_id(tenant)
        except ValueError:
            raise AuthError(
                "invalid_tenant", "the token's tenant is not a valid tenant id"
            ) from None
        subject = claims.get("sub")
        try:
            if not isinstance(subject, str):
                raise ValueError("subject must be a string")
            check_subject(subject)
        except ValueError as exc:
            raise AuthError("invalid_subject", f"the token's subject is not valid: {exc}") from None
        raw_roles = claims.get(self.roles_claim, [])
        if isinstance(raw_roles, str):
            raw_roles = raw_roles.split()  # an OAuth-style space-separated scope string
        if not isinstance(raw_roles, list) or not all(isinstance(r, str) for r in raw_roles):
            raise AuthError("invalid_roles", f"the {self.roles_claim!r} claim must list strings")
        return Principal(tenant_id=tenant, subject=subject, roles=frozenset(raw_roles))


def _is_number(value: Any) -> bool:
    """A JSON number: int or float, not a bool (a Python int), not NaN or an infinity."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not isinstance(value, float) or math.isfinite(value)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def require_token_key(settings: Settings) -> None:
    """At API start: outside the embedded mode an API with no key to verify tokens with (neither
    `AGENT_JOBS_JWT_SECRET` nor an RS256 public key) would answer every request 401; refuse to
    start instead, with one line naming the settings. Nothing falls back to a default secret."""
    if settings.embedded or settings.jwt_secret or settings.public_key():
        return
    raise ConfigError(
        "AGENT_JOBS_JWT_SECRET is not set (nor AGENT_JOBS_JWT_PUBLIC_KEY or "
        "AGENT_JOBS_JWT_PUBLIC_KEY_FILE): the API would accept no token; set the HS256 secret "
        "(32+ random bytes) or the RS256 public key"
    )


def mint_token(
    settings: Settings,
    *,
    tenant_id: str,
    subject: str,
    roles: list[str] | tuple[str, ...] = (),
    ttl_s: int = 3600,
    now: float | None = None,
) -> str:
    """A development token signed with the HS256 shared secret (`agent-jobs token`)."""
    if not settings.jwt_secret:
        raise ConfigError("set AGENT_JOBS_JWT_SECRET (32+ bytes) to mint development tokens")
    check_tenant_id(tenant_id)
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "sub": subject,
        settings.jwt_tenant_claim: tenant_id,
        settings.jwt_roles_claim: list(roles),
        "iat": issued,
        "nbf": issued,
        "exp": issued + ttl_s,
        "jti": uuid.uuid4().hex,
    }
    return jwt.encode(claims, settings.jwt_secret, algorithm="HS256")
