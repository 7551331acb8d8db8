"""Outgoing webhooks: the signature, the URL check and one send.

Every POST carries ``X-Reach-Signature: t=<unix seconds>,v1=<hex>``, where the
hex is HMAC-SHA256 of ``"<t>.<body>"`` under the target's secret (as Stripe
signs its webhooks): the receiver recomputes it over the raw body, compares in
constant time and refuses a ``t`` older than its tolerance. The URL goes
through the SSRF guard of HTTP tools (``registry.adapters.outbound`` over
``registry.adapters.ssrf``): its host is
the one allowed host, a name never resolves into private or loopback space
unless ``REACH_INTERNAL_HOSTS`` lists it, and a non-public address is reached
only when the target's allowed addresses list it.
"""

from __future__ import annotations

import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from infra import signing
from registry.adapters import ssrf
from registry.adapters.outbound import guard_for, url_problem

__all__ = [
    "SIGNATURE_HEADER",
    "Sent",
    "WebhookRefused",
    "encode_body",
    "guard_for",
    "post",
    "signature",
    "signature_valid",
    "url_problem",
]

SIGNATURE_HEADER = "X-Reach-Signature"
#: Bytes of a receiver's answer kept for the delivery log.
ANSWER_CHARS = 300


class WebhookRefused(Exception):
    """The URL may not be reached (never retried)."""


@dataclass(frozen=True)
class Sent:
    """What one POST got back: a status code, or none and an error."""

    status_code: int | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def encode_body(payload: Any) -> bytes:
    """The exact bytes sent and signed (compact JSON, UTF-8)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def signature(secret: str, body: bytes, *, timestamp: int) -> str:
    """The ``X-Reach-Signature`` value of ``body`` signed at ``timestamp``."""
    return signing.header_value(secret, body, timestamp)


def signature_valid(
    secret: str, body: bytes, header: str, *, tolerance_s: int = 300
) -> bool:
    """What a receiver checks (and the tests do): the HMAC and the age of ``t``."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance_s:
        return False
    expected = signing.digest(secret, body, timestamp)
    return hmac.compare_digest(expected, parts.get("v1", ""))


def post(
    *,
    url: str,
    allowed_hosts: list[str],
    body: bytes,
    headers: dict[str, str],
) -> Sent:
    """POST ``body`` once, through the guard, with the webhook timeout.

    Raises :class:`WebhookRefused` when the guard refuses the URL or the address
    it resolves to; a timeout, a refused connection or any answer is a
    :class:`Sent` (retried unless 2xx).
    """
    timeout = float(settings.REACH_WEBHOOK_TIMEOUT_S)
    try:
        guard = guard_for(url, allowed_hosts)
        guard.check_url(httpx.URL(url))
        with ssrf.guarded_client(guard, timeout=timeout) as client:
            response = client.post(
                url,
                content=body,
                headers={
                    "Content-Type": "application/json",
                    "User-Agent": "AgentReach/1 (webhook)",
                    **headers,
                },
            )
    except ssrf.Blocked as exc:
        raise WebhookRefused(str(exc)) from exc
    except httpx.InvalidURL as exc:
        raise WebhookRefused(f"Not a valid URL ({exc}).") from exc
    except httpx.TimeoutException:
        return Sent(None, f"No answer within {timeout:g} s.")
    except httpx.TransportError as exc:
        return Sent(None, f"Could not reach {httpx.URL(url).host}: {exc}.")
    if 200 <= response.status_code < 300:
        return Sent(response.status_code)
    answer = response.text[:ANSWER_CHARS]
    return Sent(response.status_code, f"HTTP {response.status_code}: {answer}")
