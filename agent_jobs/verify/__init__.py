"""Verifier: claims in a draft are checked against tool observations; replies are rendered here."""

from agent_jobs.verify.claims import (
    Claim,
    DuplicateCharge,
    NoRefund,
    PolicyCited,
    RefundSubmitted,
    parse_claims,
)
from agent_jobs.verify.facts import VerifiedFacts, VerifiedRefund
from agent_jobs.verify.redact import PII, Customer, ledger_words, redact
from agent_jobs.verify.render import UnverifiedClaims, format_money, render_reply
from agent_jobs.verify.verifier import Verdict, check_text, verify_claims, verify_draft

__all__ = [
    "PII",
    "Claim",
    "Customer",
    "DuplicateCharge",
    "NoRefund",
    "PolicyCited",
    "RefundSubmitted",
    "UnverifiedClaims",
    "Verdict",
    "VerifiedFacts",
    "VerifiedRefund",
    "check_text",
    "format_money",
    "ledger_words",
    "parse_claims",
    "redact",
    "render_reply",
    "verify_claims",
    "verify_draft",
]
