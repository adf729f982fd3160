"""Identifiers and identities: one rule each, used by every entry point.

Every identifier from outside (a tenant id from a token or a flag, an idempotency key from a
header, a Celery message or the CLI, a token subject) is checked here with a *full* match — `$`
with `re.match` lets a trailing newline through, `re.fullmatch` does not. The API, the Celery
intake, the CLI and the gateway all call these functions, so a value one accepts the others accept.

`principal()` is the one identity comparison: who is "the same person" for self-approval. It is
used when an approval is granted, when it is used, and it is what the approvals table stores next
to the requester, so the database's own guard compares the same canonical form.
"""

from __future__ import annotations

import re
import unicodedata

_TENANT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
# A subject (`sub`, an approver's or requester's name): printable, no control, format or
# separator characters other than a plain space, at most 255 characters.
SUBJECT_MAX = 255


def check_tenant_id(value: str) -> str:
    """Tenant ids end up in queue names and Redis keys, so they are kept to a safe alphabet."""
    if not isinstance(value, str) or not _TENANT.fullmatch(value):
        raise ValueError(
            "tenant id must be 1-63 characters of a-z, 0-9, '_', '-', '.', starting alphanumeric"
        )
    return value


def check_idempotency_key(value: str) -> str:
    if not isinstance(value, str) or not _KEY.fullmatch(value):
        raise ValueError("idempotency key must be 1-255 printable ASCII characters, no spaces")
    return value


def check_subject(value: str) -> str:
    """A person or service name: 1-255 characters, no control, format (bidi) or line characters,
    not blank. Surrounding space is kept as given; `principal()` ignores it."""
    if not isinstance(value, str) or not value.strip() or len(value) > SUBJECT_MAX:
        raise ValueError("subject must be 1-255 characters and not blank")
    for ch in value:
        cat = unicodedata.category(ch)
        if ch != " " and (cat[0] in "CZ"):
            raise ValueError(
                "subject must not contain control, format, surrogate or separator characters "
                f"(found U+{ord(ch):04X})"
            )
    return value


def principal(subject: str) -> str:
    """The canonical identity of a subject: "Alice", " alice " and its full-width spelling
    are one person. NFKC folds compatibility forms (full-width letters),
    casefold folds case, and inner runs of white space become one space."""
    folded = unicodedata.normalize("NFKC", subject).casefold()
    folded = unicodedata.normalize("NFKC", folded)
    return " ".join(folded.split())


def same_principal(a: str | None, b: str | None) -> bool:
    """Whether two subjects are the same person (None is nobody, never the same)."""
    if a is None or b is None:
        return False
    return principal(a) == principal(b)


# A lease owner is the worker's name (`AGENT_JOBS_WORKER_ID`, else `host:pid`) with the process
# and thread that hold the lease: prefork children and a process's threads share the name, and
# an owner two of them shared would let one's heartbeat or commit pass the other's fence.
_OWNER_SUFFIX = re.compile(r"#\d+\.\d+\Z")
_OWNER_NAME_MAX = 100  # the column holds 128: room for `#pid.thread`


def lease_owner_for(name: str, pid: int, thread: int) -> str:
    """The owner a lease is fenced on: unique per process and thread."""
    return f"{name[:_OWNER_NAME_MAX]}#{pid}.{thread}"


def worker_name(owner: str) -> str:
    """The worker's name in an owner (`lease_owner_for`), for people: traces and timelines."""
    return _OWNER_SUFFIX.sub("", owner)
