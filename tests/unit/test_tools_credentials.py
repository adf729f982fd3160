"""HMAC tool credentials: scoped, short-lived, verifiable, and never printed."""

from __future__ import annotations

import pytest

from agent_jobs.core.clock import FixedClock
from agent_jobs.core.errors import ConfigError
from agent_jobs.tools import CredentialInvalid, HmacCredentialProvider
from agent_jobs.tools.credentials import DEV_SECRET, SECRET_ENV


def provider(secret: str = "s3cret") -> tuple[HmacCredentialProvider, FixedClock]:
    clock = FixedClock()
    return HmacCredentialProvider(secret, clock=clock), clock


def test_mint_scope_ttl_and_verify() -> None:
    p, clock = provider()
    cred = p.mint("refunds.create", "ten_41", 60, role="support-agent-runtime")
    assert cred.scope == "tool:refunds.create tenant:ten_41"
    assert (cred.expires_at - clock.now()).total_seconds() == 60
    claims = p.verify(cred.token, tool="refunds.create", tenant_id="ten_41")
    assert claims["role"] == "support-agent-runtime" and claims["scope"] == cred.scope
    assert cred.token not in repr(cred)


def test_expired_wrong_tool_wrong_tenant_forged_and_malformed_are_refused() -> None:
    p, clock = provider()
    cred = p.mint("refunds.create", "ten_41", 60)
    with pytest.raises(CredentialInvalid, match="tool"):
        p.verify(cred.token, tool="orders.get")
    with pytest.raises(CredentialInvalid, match="tenant"):
        p.verify(cred.token, tenant_id="ten_42")
    other, _ = provider("another-secret")
    with pytest.raises(CredentialInvalid, match="signature"):
        other.verify(cred.token)
    head, payload, sig = cred.token.split(".")
    with pytest.raises(CredentialInvalid):
        p.verify(f"{head}.{payload}x.{sig}")
    with pytest.raises(CredentialInvalid, match="malformed"):
        p.verify("garbage")
    clock.advance(59)
    p.verify(cred.token)
    clock.advance(1)
    with pytest.raises(CredentialInvalid, match="expired"):
        p.verify(cred.token)


def test_tokens_are_unique_per_mint() -> None:
    p, _ = provider()
    assert p.mint("t", "ten", 60).token != p.mint("t", "ten", 60).token


@pytest.mark.parametrize("ttl", [0, -1, 901])
def test_ttl_must_be_short_and_positive(ttl: int) -> None:
    p, _ = provider()
    with pytest.raises(ValueError):
        p.mint("t", "ten", ttl)


def test_secret_from_environment_with_a_development_default() -> None:
    clock = FixedClock()
    from_env = HmacCredentialProvider.from_env({SECRET_ENV: "prod-secret"}, clock=clock)
    token = from_env.mint("t", "ten", 60).token
    HmacCredentialProvider("prod-secret", clock=clock).verify(token)
    with pytest.raises(CredentialInvalid):
        HmacCredentialProvider(DEV_SECRET, clock=clock).verify(token)
    dev = HmacCredentialProvider.from_env({}, clock=clock)
    HmacCredentialProvider(DEV_SECRET, clock=clock).verify(dev.mint("t", "ten", 60).token)
    with pytest.raises(ValueError):
        HmacCredentialProvider("")


@pytest.mark.parametrize(
    "broker", ["redis://127.0.0.1:6379/0", "rediss://cache.internal:6380/1", "amqp://mq//"]
)
def test_outside_the_embedded_mode_a_missing_secret_fails_closed(broker: str) -> None:
    """No public development value for a deployment: whoever knew it could mint credentials."""
    for unset in ({}, {SECRET_ENV: ""}, {SECRET_ENV: "   "}):
        with pytest.raises(ConfigError, match=SECRET_ENV):
            HmacCredentialProvider.from_env({"AGENT_JOBS_BROKER_URL": broker, **unset})
    configured = {"AGENT_JOBS_BROKER_URL": broker, SECRET_ENV: "prod-secret"}
    clock = FixedClock()
    token = HmacCredentialProvider.from_env(configured, clock=clock).mint("t", "ten", 60).token
    HmacCredentialProvider("prod-secret", clock=clock).verify(token)
