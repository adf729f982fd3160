"""Checks a draft's claims, and its text, against verified facts.

A failed check sends the draft back for a redraft; it never reaches the customer. The textual
check is deliberately cheap and strict: any refund id, payment id, amount or account-like token in
the text that the facts do not back is a failure, because an injected "refund to account X" or a
hallucinated reference number is exactly what it exists to catch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from agent_jobs.core.contracts import Frozen
from agent_jobs.verify.claims import Claim, RefundSubmitted
from agent_jobs.verify.facts import VerifiedFacts


class Verdict(Frozen):
    """`ok` when nothing failed; `failures` are stable codes, e.g. `refund_mismatch:rf_3301`."""

    ok: bool
    failures: list[str]


_REFUND_ID = re.compile(r"\brf_[A-Za-z0-9_-]+")
_PAYMENT_ID = re.compile(r"\bpay_[A-Za-z0-9_-]+")
_AMOUNT = re.compile(r"(?:₹|\bINR|\bRs\.?)\s?(\d[\d,]*(?:\.\d{1,2})?)")
# Account-like: long digit runs (bank accounts, cards, even with spaces or dashes), IBANs,
# e-mail or UPI handles, and explicit account words followed by an identifier.
_ACCOUNTS = (
    # (A full stop may end the sentence after one; a digit after it makes it a decimal.)
    re.compile(r"(?<![\w.])\d(?:[ -]?\d){8,}(?!\w)(?!\.\d)"),
    re.compile(r"\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b"),
    # After the @ a letter, so `POL-REF-004@4` (a policy version) is not mistaken for a handle.
    re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z][\w-]*(?:\.[\w-]+)*"),
    re.compile(r"\bacct_[A-Za-z0-9]+"),
    # "account no. 1234..." but not "your account yet": the identifier must contain a digit.
    re.compile(
        r"\b(?:acct|account|a/c|iban|upi)\b[\s#:.]*(?:no\.?|number)?[\s#:.]*"
        r"(?=[A-Za-z_-]*\d)[A-Za-z0-9][\w-]{3,}",
        re.IGNORECASE,
    ),
)


def _without_known_ids(text: str, ids: frozenset[str]) -> str:
    r"""`text` with every verified id blanked out where it stands as a token of its own.

    Only whole tokens go: an id inside a longer run of digits (or next to one, across a space or
    a dash) is left alone, so a real account number that merely contains an order id still
    trips the account check. Longer ids first, each over what the previous ones left.

    Scanned by hand rather than with a pattern per id: the ids are new with every task, so each
    pattern would be compiled for one use (a fifth of a millisecond apiece). It is exactly
    `re.sub(rf"(?<![\w.])(?<!\d[ -]){re.escape(id)}(?!\w)(?!\.\w)(?![ -]\d)", " ", text)`
    for each id, as `tests/unit/test_verify_ids.py` checks against that very pattern."""
    for known in sorted(ids, key=len, reverse=True):
        if known:  # an empty id names nothing
            text = _blank_token(text, known)
    return text


def _word(c: str) -> bool:
    r"""`\w` of a `str` pattern: a letter, digit or numeric character, or the underscore."""
    return c.isalnum() or c == "_"


def _blank_token(text: str, known: str) -> str:
    n, size = len(text), len(known)
    parts: list[str] = []
    start = pos = 0
    while (i := text.find(known, pos)) >= 0:
        j = i + size
        before = text[i - 1] if i else ""
        after = text[j] if j < n else ""
        next_ = text[j + 1] if j + 1 < n else ""
        if (
            (before and (_word(before) or before == "."))
            or (i >= 2 and before in " -" and text[i - 2].isdecimal())
            or (after and _word(after))
            or (after == "." and next_ and _word(next_))
            or (after and after in " -" and next_.isdecimal())
        ):
            pos = i + 1
            continue
        parts += (text[start:i], " ")
        start = pos = j
    if not parts:
        return text
    parts.append(text[start:])
    return "".join(parts)


def verify_claims(claims: Sequence[Claim], facts: VerifiedFacts) -> Verdict:
    """Check each claim against the facts by the claim's own check (`CheckedClaim.check`),
    whatever classes the agent declared; per the seed's `verifyClaims` for the refund's four.

    A duplicate charge needs at least two distinct payment ids, all observed captures; a refund
    must exist with the claimed amount and the claimed status (a "settled" claim fails while the
    ledger says processing); a cited policy must have been retrieved at that version; "no refund"
    fails if this task's own refund exists or another claim says one was submitted.
    """
    failures: list[str] = []
    for claim in claims:
        failures.extend(claim.check(facts, claims))
    return Verdict(ok=not failures, failures=failures)


def _minor(text: str) -> int | None:
    try:
        return int(Decimal(text.replace(",", "")) * 100)
    except InvalidOperation:
        return None


def check_text(text: str, claims: Sequence[Claim], facts: VerifiedFacts) -> list[str]:
    """Identifiers and amounts in free text that neither the claims nor the facts back."""
    failures: list[str] = []
    claimed_refunds = {c.refund_id for c in claims if isinstance(c, RefundSubmitted)}
    for rid in dict.fromkeys(_REFUND_ID.findall(text)):
        if rid not in claimed_refunds or rid not in facts.refunds:
            failures.append(f"unverified_refund_id:{rid}")
    for pid in dict.fromkeys(_PAYMENT_ID.findall(text)):
        if pid not in facts.payment_amounts:
            failures.append(f"unverified_payment_id:{pid}")
    allowed = facts.known_amounts()
    for raw in dict.fromkeys(_AMOUNT.findall(text)):
        if _minor(raw) not in allowed:
            failures.append(f"unverified_amount:{raw}")
    # The refund tool cannot send money anywhere but the original payment method, so no account
    # is ever a verified fact: any account-like token is an injection or a hallucination. Ids the
    # ledger stated are facts of any shape, so they are taken out of the text first.
    scan = _without_known_ids(text, facts.ids)
    if any(p.search(scan) for p in _ACCOUNTS):
        failures.append("unverified_account")
    return failures


def verify_draft(text: str, claims: Sequence[Claim], facts: VerifiedFacts) -> Verdict:
    """`verify_claims` plus `check_text` on the draft's own wording."""
    failures = verify_claims(claims, facts).failures + check_text(text, claims, facts)
    return Verdict(ok=not failures, failures=failures)
