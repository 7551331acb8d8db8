"""The product's one HMAC signature of a body with its time (Stripe's scheme):
``v1`` is the hex HMAC-SHA256, under a shared secret, of the unix time, a dot and
the raw body; the header reads ``t=<unix>,v1=<hex>``. Outgoing webhooks sign with
it (``notify.webhooks``), triggers verify it (``automations.signing``)."""

from __future__ import annotations

import hashlib
import hmac


def digest(secret: str, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of ``<timestamp>.<body>`` under ``secret``."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def header_value(secret: str, body: bytes, timestamp: int) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    return f"t={timestamp},v1={digest(secret, body, timestamp)}"
