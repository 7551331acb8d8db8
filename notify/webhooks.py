"""Outgoing webhooks: the signature, the URL check and one send.

Every POST carries ``X-Reach-Signature: t=<unix seconds>,v1=<hex>``, where the
hex is HMAC-SHA256 of ``"<t>.<body>"`` under the target's secret (as Stripe
signs its webhooks): the receiver recomputes it over the raw body, compares in
constant time and refuses a ``t`` older than its tolerance. The URL goes
through the SSRF guard of HTTP tools (``registry.adapters.ssrf``): its host is
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
from registry.adapters.http import internal_hosts

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


def guard_for(url: str, allowed_hosts: list[str]) -> ssrf.Guard:
    """The guard of a webhook: its own host, plus the addresses listed for it.

    A host written as a non-public address (``http://10.0.0.5/``) is not allowed
    by being the URL's: the target must list it, as an HTTP tool must.
    """
    host = httpx.URL(url).host
    address = ssrf.as_address(host) if host else None
    own = [] if address is not None and ssrf.address_problem(address) else [host]
    return ssrf.Guard.from_entries([*own, *allowed_hosts], internal_hosts())


def url_problem(url: str, allowed_hosts: list[str]) -> str | None:
    """Why ``url`` cannot be a webhook's (None when it can, as far as the URL
    tells: where its name resolves is checked on every send)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        return f"Not a valid URL ({exc})."
    problems = ssrf.entry_problems(allowed_hosts)
    if problems:
        return " ".join(problems)
    if not parsed.host:
        return "The URL has no host."
    try:
        guard = guard_for(url, allowed_hosts)
        guard.check_url(parsed)
        address = ssrf.as_address(parsed.host)
        if address is not None:
            # An address literal: checked now, as the connection will be.
            guard.connect_addresses(parsed.host, parsed.port or 443)
    except ssrf.Blocked as exc:
        return str(exc)
    return None


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
