"""Secrets for HTTP tools: encrypted at rest under a keyring from the settings.

``settings.REACH_SECRETS_KEYS`` lists the keys newest first (``REACH_SECRETS_KEY``,
then ``REACH_SECRETS_OLD_KEYS``): the first encrypts, every one decrypts
(``cryptography``'s ``MultiFernet``). Each stored secret records the id of the key
that encrypted it, so ``secrets_rotate`` re-encrypts only what the newest key did
not encrypt: run again after an interruption, it finishes the rest.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_append
from infra.runtime import redactor
from registry.models import Secret


def _fernet_key(raw: str) -> bytes:
    """The Fernet key of a configured key: any text, through sha256."""
    return base64.urlsafe_b64encode(hashlib.sha256(raw.encode()).digest())


def key_id(raw: str) -> str:
    """A short public name of a key (a hash of it: it reveals nothing of the key)."""
    digest = hashlib.sha256(b"reach-secrets-key-id\0" + _fernet_key(raw))
    return digest.hexdigest()[:12]


def configured_keys() -> list[str]:
    """The keys of the keyring, newest first; at least one."""
    keys = [key for key in getattr(settings, "REACH_SECRETS_KEYS", []) if key]
    return keys or [settings.SECRET_KEY]


def current_key_id() -> str:
    """The id of the key new secrets are encrypted with (the newest)."""
    return key_id(configured_keys()[0])


def _keyring() -> MultiFernet:
    return MultiFernet([Fernet(_fernet_key(raw)) for raw in configured_keys()])


def seal(value: str) -> str:
    """``value`` encrypted with the secrets key (what :func:`unseal` reads)."""
    return _keyring().encrypt(value.encode()).decode()


def unseal(token: str) -> str | None:
    """What :func:`seal` sealed; None when the key changed since."""
    try:
        return _keyring().decrypt(token.encode()).decode()
    except InvalidToken:
        return None


def secret_set(*, name: str, value: str) -> Secret:
    token = _keyring().encrypt(value.encode()).decode()
    secret, _ = Secret.objects.update_or_create(
        name=name,
        defaults={
            "ciphertext": token,
            "key_id": current_key_id(),
            "updated_at": timezone.now(),
        },
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
        return _keyring().decrypt(secret.ciphertext.encode()).decode()
    except InvalidToken:
        return None


def secret_values() -> dict[str, str]:
    values: dict[str, str] = {}
    keyring = _keyring()
    for secret in Secret.objects.all():
        try:
            values[secret.name] = keyring.decrypt(secret.ciphertext.encode()).decode()
        except InvalidToken:
            continue
    return values


def secrets_by_key() -> dict[str, int]:
    """How many stored secrets each key id encrypted (``""``: not recorded, from
    before key ids were kept)."""
    counts: dict[str, int] = {}
    for recorded in Secret.objects.values_list("key_id", flat=True):
        counts[recorded] = counts.get(recorded, 0) + 1
    return counts


def secrets_undecryptable() -> list[str]:
    """Names of the stored secrets no key of the keyring decrypts."""
    keyring = _keyring()
    names = []
    for secret in Secret.objects.order_by("name"):
        try:
            keyring.decrypt(secret.ciphertext.encode())
        except InvalidToken:
            names.append(secret.name)
    return names


@dataclass
class Rotation:
    """What one ``secrets_rotate`` did."""

    key_id: str
    rotated: list[str] = field(default_factory=list)
    #: Secrets no key of the keyring decrypts: left as they are, nothing lost.
    undecryptable: list[str] = field(default_factory=list)
    #: Secrets already under the newest key when the rotation started.
    already: int = 0

    @property
    def complete(self) -> bool:
        return not self.undecryptable


def secrets_rotate(
    *, actor: str, on_rotated: Callable[[str], None] | None = None
) -> Rotation:
    """Re-encrypt every stored secret under the newest key of the keyring.

    One secret per transaction, each recording the key that now encrypts it, so
    the processes running meanwhile read every secret at every moment (their
    keyring holds the old and the new key) and an interrupted rotation resumes
    where it stopped: run it again and it re-encrypts only what is left. A
    secret changed meanwhile (the admin saved a new value, under the newest key
    already) is not overwritten. ``on_rotated(name)`` is told of each rotated
    secret (the command prints progress). Audited: ``secrets.rotation_started``
    with what is pending, ``secrets.rotated`` once none is left.
    """
    newest = current_key_id()
    keyring = _keyring()
    pending = list(
        Secret.objects.exclude(key_id=newest)
        .order_by("name")
        .values_list("pk", flat=True)
    )
    rotation = Rotation(
        key_id=newest, already=Secret.objects.filter(key_id=newest).count()
    )
    audit_append(
        kind=AuditKind.SECRETS_ROTATION_STARTED,
        actor=actor,
        object_type="secrets_key",
        object_id=newest,
        data={"pending": len(pending), "keys": len(configured_keys())},
    )
    for pk in pending:
        with transaction.atomic():
            secret = Secret.objects.filter(pk=pk).exclude(key_id=newest).first()
            if secret is None:  # deleted, or saved anew under the newest key
                continue
            try:
                token = keyring.rotate(secret.ciphertext.encode()).decode()
            except InvalidToken:
                rotation.undecryptable.append(secret.name)
                continue
            changed = Secret.objects.filter(pk=pk, ciphertext=secret.ciphertext).update(
                ciphertext=token, key_id=newest
            )
        if changed:
            rotation.rotated.append(secret.name)
            if on_rotated is not None:
                on_rotated(secret.name)
    audit_append(
        kind=(
            AuditKind.SECRETS_ROTATED
            if rotation.complete
            else AuditKind.SECRETS_ROTATION_INCOMPLETE
        ),
        actor=actor,
        object_type="secrets_key",
        object_id=newest,
        data={
            "rotated": len(rotation.rotated),
            "already": rotation.already,
            "undecryptable": rotation.undecryptable,
        },
    )
    return rotation


def configured_key_ids() -> list[str]:
    """The ids of the keyring's keys, newest first."""
    return [key_id(raw) for raw in configured_keys()]
