"""Secrets for HTTP tools: encrypted at rest with a key from the environment."""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.utils import timezone

from infra.runtime import redactor
from registry.models import Secret


def _fernet() -> Fernet:
    raw = os.environ.get("REACH_SECRETS_KEY") or settings.SECRET_KEY
    key = base64.urlsafe_b64encode(hashlib.sha256(raw.encode()).digest())
    return Fernet(key)


def seal(value: str) -> str:
    """``value`` encrypted with the secrets key (what :func:`unseal` reads)."""
    return _fernet().encrypt(value.encode()).decode()


def unseal(token: str) -> str | None:
    """What :func:`seal` sealed; None when the key changed since."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        return None


def secret_set(*, name: str, value: str) -> Secret:
    token = _fernet().encrypt(value.encode()).decode()
    secret, _ = Secret.objects.update_or_create(
        name=name, defaults={"ciphertext": token, "updated_at": timezone.now()}
    )
    redactor().refresh()
    return secret


def secret_value(name: str) -> str | None:
    """The value of a secret: ``REACH_SECRET_<NAME>`` wins over the store."""
    env = os.environ.get(f"REACH_SECRET_{name}")
    if env:
        return env
    secret = Secret.objects.filter(name=name).first()
    if secret is None:
        return None
    try:
        return _fernet().decrypt(secret.ciphertext.encode()).decode()
    except InvalidToken:
        return None


def secret_values() -> dict[str, str]:
    values: dict[str, str] = {}
    fernet = _fernet()
    for secret in Secret.objects.all():
        try:
            values[secret.name] = fernet.decrypt(secret.ciphertext.encode()).decode()
        except InvalidToken:
            continue
    return values
