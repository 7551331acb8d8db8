"""Trigger signatures: ``X-Reach-Signature: t=<unix seconds>,v1=<hex>``.

``v1`` is HMAC-SHA256 of ``"<t>." + body`` under the trigger's secret (the
scheme Stripe's webhooks use). Plain Python: bytes and numbers in, a verdict
out; the replay check needs Redis and is the service's.
"""

from __future__ import annotations

import hmac
from enum import StrEnum

from infra import signing

HEADER = "X-Reach-Signature"


class Refusal(StrEnum):
    """Why a signed request was refused (the audit event's ``reason``)."""

    UNSIGNED = "unsigned"
    MALFORMED = "malformed"
    STALE = "stale"
    FORGED = "forged"
    REPLAYED = "replayed"
    RATE_LIMITED = "rate_limited"
    DISABLED = "disabled"


class SignatureRefused(Exception):
    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The header value for ``body`` sent at ``timestamp`` (what a caller sends)."""
    return signing.header_value(secret, body, timestamp)


def verify(
    secret: str, body: bytes, header: str | None, *, now: float, tolerance_s: int
) -> tuple[int, str]:
    """Check ``header`` against ``body``; the timestamp and signature it carries.

    Raises :class:`SignatureRefused` for a missing or malformed header, a
    timestamp further than ``tolerance_s`` from ``now``, or a signature that
    does not match (compared in constant time).
    """
    if not header:
        raise SignatureRefused(
            Refusal.UNSIGNED, f"Sign the body: send {HEADER}: t=<unix>,v1=<hex>."
        )
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        parts.setdefault(key, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        raise SignatureRefused(
            Refusal.MALFORMED, f"{HEADER} has no t=<unix seconds>."
        ) from None
    signatures = parts.get("v1") or []
    if not signatures:
        raise SignatureRefused(Refusal.MALFORMED, f"{HEADER} has no v1=<hex>.")
    if abs(now - timestamp) > tolerance_s:
        raise SignatureRefused(
            Refusal.STALE,
            f"The signature's timestamp is more than {tolerance_s} s from now; "
            "sign the request again when you send it.",
        )
    expected = signing.digest(secret, body, timestamp)
    for candidate in signatures:
        if hmac.compare_digest(expected, candidate.strip().lower()):
            return timestamp, expected
    raise SignatureRefused(
        Refusal.FORGED, "The signature does not match the body and the secret."
    )
