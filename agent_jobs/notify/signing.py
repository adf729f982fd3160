"""Standard Webhooks signatures: `v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`.

A secret is `whsec_` + base64 of 32 random bytes. During a rotation several secrets are live:
the header carries one signature per secret, space-separated, and a receiver holding either
secret verifies (the `standardwebhooks` library accepts any matching one).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode()


def _key(secret: str) -> bytes:
    raw = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    return base64.b64decode(raw + "==")


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return (
        "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()
    )


def headers(msg_id: str, timestamp: int, body: bytes, secrets: list[str]) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with every live secret."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, msg_id, timestamp, body) for s in secrets),
    }
