"""Bearer-token verification: what is accepted, and every forged or stale token refused (401 at the
API, which the last tests check through the app without any database)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.api.auth import AuthError, Principal, TokenVerifier, bearer_token, mint_token
from agent_jobs.config import Settings
from agent_jobs.core.errors import ConfigError

SECRET = "unit-secret-0123456789-abcdefghijklmnopq"


def _rsa() -> tuple[Any, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key, public.decode()


PRIVATE, PUBLIC_PEM = _rsa()
HS = Settings(jwt_secret=SECRET)
RS = Settings(jwt_public_key=PUBLIC_PEM)
BOTH = Settings(jwt_secret=SECRET, jwt_public_key=PUBLIC_PEM)


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": "agent-jobs",
        "aud": "agent-jobs",
        "sub": "svc-orders",
        "tenant": "acme",
        "roles": ["approver"],
        "iat": now,
        "exp": now + 300,
    }
    for k, v in changes.items():
        if v is None:
            base.pop(k, None)
        else:
            base[k] = v
    return base


def hs(**changes: Any) -> str:
    return jwt.encode(claims(**changes), SECRET, algorithm="HS256")


def rs(**changes: Any) -> str:
    return jwt.encode(claims(**changes), PRIVATE, algorithm="RS256")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    return ".".join(
        [
            _b64(json.dumps(header).encode()),
            _b64(json.dumps(payload).encode()),
            _b64(signature),
        ]
    )


def refused(cfg: Settings, token: str | None) -> str:
    with pytest.raises(AuthError) as info:
        TokenVerifier(cfg).verify(token)
    return info.value.reason


def test_hs256_token_names_tenant_subject_and_roles() -> None:
    who = TokenVerifier(HS).verify(hs())
    assert who == Principal("acme", "svc-orders", frozenset({"approver"}))


def test_rs256_token_verifies_with_the_public_key() -> None:
    assert TokenVerifier(RS).verify(rs()).tenant_id == "acme"
    assert TokenVerifier(BOTH).verify(rs()).subject == "svc-orders"


def test_minted_development_token_round_trips() -> None:
    tok = mint_token(HS, tenant_id="beta", subject="alice", roles=["approver"], ttl_s=60)
    assert TokenVerifier(HS).verify(tok) == Principal("beta", "alice", frozenset({"approver"}))


def test_alg_none_is_refused() -> None:
    token = unsigned({"alg": "none", "typ": "JWT"}, claims())
    assert refused(HS, token) == "algorithm_refused"
    assert refused(BOTH, token) == "algorithm_refused"


def _confused() -> str:
    """The classic attack: sign HS256 with the server's RSA *public* key as the HMAC secret."""
    header = {"alg": "HS256", "typ": "JWT"}
    head_payload = ".".join(
        [_b64(json.dumps(header).encode()), _b64(json.dumps(claims()).encode())]
    )
    mac = hmac.new(PUBLIC_PEM.encode(), head_payload.encode(), hashlib.sha256).digest()
    return head_payload + "." + _b64(mac)


def test_hs_rs_confusion_is_refused() -> None:
    forged = _confused()
    # Only RS256 configured: HS256 selects no key at all.
    assert refused(RS, forged) == "algorithm_refused"
    # Both configured: HS256 is bound to the shared secret, never to the public key.
    assert refused(BOTH, forged) == "bad_signature"


def test_rs256_token_is_refused_where_only_hs256_is_configured() -> None:
    assert refused(HS, rs()) == "algorithm_refused"


def test_other_algorithms_are_refused() -> None:
    assert refused(HS, jwt.encode(claims(), SECRET * 2, algorithm="HS512")) == "algorithm_refused"


def test_nothing_configured_refuses_every_token() -> None:
    assert refused(Settings(), hs()) == "algorithm_refused"


@pytest.mark.parametrize(
    ("token_changes", "reason"),
    [
        ({"exp": int(time.time()) - 3600}, "token_expired"),
        ({"aud": "another-service"}, "wrong_audience"),
        ({"iss": "someone-else"}, "wrong_issuer"),
        ({"exp": None}, "missing_claim"),
        ({"aud": None}, "missing_claim"),
        ({"iss": None}, "missing_claim"),
        ({"sub": None}, "missing_claim"),
        ({"tenant": None}, "missing_claim"),
        ({"tenant": "ACME; DROP"}, "invalid_tenant"),
        ({"roles": "approver admin"}, None),  # a space-separated string is accepted
        ({"roles": [1, 2]}, "invalid_roles"),
        ({"nbf": int(time.time()) + 3600}, "invalid_token"),
    ],
)
def test_claims_are_checked(token_changes: dict[str, Any], reason: str | None) -> None:
    for cfg, make in ((HS, hs), (RS, rs)):
        token = make(**token_changes)
        if reason is None:
            assert TokenVerifier(cfg).verify(token).roles == {"approver", "admin"}
        else:
            assert refused(cfg, token) == reason


def tamper_tenant(token: str, tenant: str = "victim") -> str:
    """The same token with its tenant claim rewritten and the original signature kept."""
    head, payload, sig = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body["tenant"] = tenant
    return f"{head}.{_b64(json.dumps(body).encode())}.{sig}"


def test_tampered_tenant_claim_fails_the_signature() -> None:
    for token in (hs(), rs()):
        assert refused(BOTH, tamper_tenant(token)) == "bad_signature"


def test_wrong_secret_and_garbage_are_refused() -> None:
    other = jwt.encode(claims(), "another-secret-0123456789-abcdefghij", algorithm="HS256")
    assert refused(HS, other) == "bad_signature"
    assert refused(HS, "not.a.jwt") == "invalid_token"
    assert refused(HS, "x" * 9000) == "invalid_token"
    assert refused(HS, None) == "missing_token"


def test_a_private_key_is_not_accepted_as_the_verification_key() -> None:
    pem = PRIVATE.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    with pytest.raises(ConfigError):
        TokenVerifier(Settings(jwt_public_key=pem))


def test_short_secret_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_jobs.config import load_settings

    monkeypatch.setenv("AGENT_JOBS_JWT_SECRET", "short")
    with pytest.raises(ConfigError):
        load_settings()


def test_bearer_header_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer") is None
    assert bearer_token(None) is None


# -- through the app: every forged or stale token is a 401 and leaks nothing ----------------------


class _NoStore:
    engine = None  # read once by `create_app` (the schema check), never by a request

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"an unauthenticated request reached the store ({name})")


@pytest.fixture
def client() -> Any:
    from fastapi.testclient import TestClient

    from agent_jobs.api.app import create_app
    from agent_jobs.workflows import default_registry

    class Runtime:
        settings = BOTH
        store = _NoStore()
        orchestrator = _NoStore()
        workflows = default_registry()

    return TestClient(create_app(Runtime(), BOTH))  # type: ignore[arg-type]


FORGED = {
    "none": lambda: unsigned({"alg": "none"}, claims()),
    "expired": lambda: hs(exp=int(time.time()) - 3600),
    "wrong_audience": lambda: rs(aud="other"),
    "wrong_issuer": lambda: hs(iss="other"),
    "missing_exp": lambda: rs(exp=None),
    "tampered_tenant": lambda: tamper_tenant(rs()),
    "hs_rs_confusion": _confused,
}


@pytest.mark.parametrize("kind", sorted(FORGED))
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/tasks"),
        ("GET", "/v1/tasks/tsk_1"),
        ("GET", "/v1/tasks/tsk_1/events"),
        ("POST", "/v1/tasks/tsk_1/cancel"),
        ("GET", "/v1/approvals"),
        ("POST", "/v1/approvals/apr_1/grant"),
        ("POST", "/v1/approvals/apr_1/deny"),
    ],
)
def test_forged_tokens_get_401_everywhere(client: Any, kind: str, method: str, path: str) -> None:
    tok = FORGED[kind]()
    body = {"workflow": "noop@1", "input": {}} if path == "/v1/tasks" else None
    r = client.request(
        method, path, json=body, headers={"Authorization": f"Bearer {tok}", "Idempotency-Key": "k"}
    )
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    error = r.json()["error"]
    assert error["code"] == "unauthorized"
    assert "acme" not in r.text and "svc-orders" not in r.text  # nothing about the claims leaks


def test_missing_and_non_bearer_authorization_get_401(client: Any) -> None:
    assert client.get("/v1/tasks/tsk_1").status_code == 401
    r = client.get("/v1/tasks/tsk_1", headers={"Authorization": "Basic dXNlcjpwdw=="})
    assert r.status_code == 401


# -- odd claims: types, NaN, control characters — always an AuthError, never a library error -----


def signed_raw(payload_json: str) -> str:
    """An HS256 token over exactly this payload text (JSON that `jwt.encode` would not write)."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(payload_json.encode())
    mac = hmac.new(SECRET.encode(), f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(mac)}"


FAR = int(time.time()) + 10**6


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
# Named ids: the values hold the clock, and parallel workers must collect the same test names.
@pytest.mark.parametrize(
    "value",
    [str(FAR), "1", True, False, [FAR], {"t": FAR}],
    ids=["far-as-text", "one-as-text", "true", "false", "list", "object"],
)
def test_time_claims_must_be_numbers(claim: str, value: Any) -> None:
    assert refused(HS, hs(**{claim: value})) in ("invalid_token", "token_expired", "missing_claim")


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "null"])
def test_non_finite_time_claims_are_refused(claim: str, literal: str) -> None:
    base = {k: v for k, v in claims().items() if k != claim}
    payload = json.dumps(base)[:-1] + f', "{claim}": {literal}}}'
    assert refused(HS, signed_raw(payload))


def test_numeric_time_claims_still_work() -> None:
    now = time.time()
    p = TokenVerifier(HS).verify(hs(exp=now + 300.5, nbf=now - 1.5, iat=now))
    assert p.subject == "svc-orders"


@pytest.mark.parametrize(
    "sub", ["a\x00b", "\ud800", "bob\u202e", "line\nbreak", "", "   ", "x" * 256, 7, None, ["a"]]
)
def test_the_subject_follows_check_subject(sub: Any) -> None:
    if isinstance(sub, str) and "\ud800" in sub:
        token = signed_raw(json.dumps(claims(sub="PLACEHOLDER")).replace("PLACEHOLDER", "\\ud800"))
    elif sub is None:
        token = hs(sub=None)
    else:
        token = hs(sub=sub)
    assert refused(HS, token) in ("invalid_subject", "missing_claim", "invalid_token")


@pytest.mark.parametrize("tenant", ["acme\n", "Acme", "a" * 64, "", 5, None])
def test_the_tenant_follows_check_tenant_id(tenant: Any) -> None:
    assert refused(HS, hs(tenant=tenant) if tenant is not None else hs(tenant=None))


_json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(["exp", "nbf", "iat", "sub", "tenant", "roles", "aud", "iss", "jti"]),
        _json_value,
        max_size=4,
    )
)
def test_any_claims_either_verify_or_raise_auth_error(changes: dict[str, Any]) -> None:
    payload = {**claims(), **changes}
    token = signed_raw(json.dumps(payload))  # `jwt.encode` itself refuses some of these
    try:
        who = TokenVerifier(HS).verify(token)
    except AuthError:
        return
    # Accepted: then every rule held.
    assert isinstance(payload["exp"], int | float) and not isinstance(payload["exp"], bool)
    assert who.tenant_id == payload["tenant"] and who.subject == payload["sub"]


@settings(max_examples=150, deadline=None)
@given(token=st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_token_text_is_an_auth_error(token: str) -> None:
    with pytest.raises(AuthError):
        TokenVerifier(BOTH).verify(token)
