"""Rotating the key of stored secrets: a keyring (newest first) in which every
key decrypts, a rotation that re-encrypts one secret at a time under the newest
key, resumes after an interruption and is audited."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent, AuditKind
from infra.runtime import configured_secrets
from registry.models import Secret
from registry.secrets import key_id, secret_set, secret_value, secrets_rotate

pytestmark = pytest.mark.django_db

VALUES = {f"TOKEN_{n}": f"value-{n}-0123456789" for n in range(4)}


@pytest.fixture
def under_old_key(settings) -> None:
    settings.REACH_SECRETS_KEYS = ["old-key"]
    for name, value in VALUES.items():
        secret_set(name=name, value=value)


def readable_with(settings, keys: list[str]) -> set[str]:
    """The secrets a process holding only ``keys`` can read."""
    kept = settings.REACH_SECRETS_KEYS
    settings.REACH_SECRETS_KEYS = keys
    try:
        return {name for name, value in VALUES.items() if secret_value(name) == value}
    finally:
        settings.REACH_SECRETS_KEYS = kept


def kinds() -> list[str]:
    return list(
        AuditEvent.objects.filter(kind__startswith="secrets.").values_list(
            "kind", flat=True
        )
    )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in the middle of a rotation."""


def interrupt_after(count: int):
    seen: list[str] = []

    def on_rotated(name: str) -> None:
        seen.append(name)
        if len(seen) == count:
            raise Interrupted

    return on_rotated


def test_each_secret_records_the_key_that_encrypted_it(settings, under_old_key):
    assert set(Secret.objects.values_list("key_id", flat=True)) == {key_id("old-key")}
    settings.REACH_SECRETS_KEYS = ["new-key", "old-key"]
    secret_set(name="FRESH", value="fresh-value-123456")
    assert Secret.objects.get(name="FRESH").key_id == key_id("new-key")
    assert key_id("new-key") != key_id("old-key")
    assert "new-key" not in key_id("new-key")


def test_during_a_rotation_old_and_new_keys_both_decrypt(settings, under_old_key):
    settings.REACH_SECRETS_KEYS = ["new-key", "old-key"]
    with pytest.raises(Interrupted):
        secrets_rotate(actor="ops", on_rotated=interrupt_after(2))

    by_key = dict(Secret.objects.values_list("name", "key_id"))
    rotated = {name for name, key in by_key.items() if key == key_id("new-key")}
    left = {name for name, key in by_key.items() if key == key_id("old-key")}
    assert len(rotated) == 2 and len(left) == 2
    # Half under each key, and a process with both reads every one of them.
    assert readable_with(settings, ["new-key", "old-key"]) == set(VALUES)
    assert readable_with(settings, ["new-key"]) == rotated
    assert readable_with(settings, ["old-key"]) == left
    # The redactor of a process with this keyring knows every value too.
    known = set(configured_secrets().values())
    assert set(VALUES.values()) <= known


def test_an_interrupted_rotation_resumes_and_finishes(settings, under_old_key):
    settings.REACH_SECRETS_KEYS = ["new-key", "old-key"]
    with pytest.raises(Interrupted):
        secrets_rotate(actor="ops", on_rotated=interrupt_after(1))
    assert kinds() == [AuditKind.SECRETS_ROTATION_STARTED]

    out = io.StringIO()
    call_command("rotate_secrets_key", stdout=out)
    assert "3 secret(s) re-encrypted" in out.getvalue()
    assert "1 already were" in out.getvalue()
    assert set(Secret.objects.values_list("key_id", flat=True)) == {key_id("new-key")}
    # The old key can go: the newest alone reads everything.
    assert readable_with(settings, ["new-key"]) == set(VALUES)
    assert kinds() == [
        AuditKind.SECRETS_ROTATION_STARTED,
        AuditKind.SECRETS_ROTATION_STARTED,
        AuditKind.SECRETS_ROTATED,
    ]
    finished = AuditEvent.objects.filter(kind=AuditKind.SECRETS_ROTATED).get()
    assert finished.object_id == key_id("new-key")
    assert finished.data["rotated"] == 3 and finished.data["already"] == 1
    assert not any(value in str(finished.data) for value in VALUES.values())

    # Run again: nothing left to do, nothing changed.
    ciphertexts = dict(Secret.objects.values_list("name", "ciphertext"))
    again = io.StringIO()
    call_command("rotate_secrets_key", stdout=again)
    assert "0 secret(s) re-encrypted under" in again.getvalue()
    assert dict(Secret.objects.values_list("name", "ciphertext")) == ciphertexts


def test_check_fails_while_any_secret_is_not_under_the_newest_key(
    settings, under_old_key
):
    settings.REACH_SECRETS_KEYS = ["new-key", "old-key"]
    with pytest.raises(CommandError, match="4 secret"):
        call_command("rotate_secrets_key", "--check", stdout=io.StringIO())
    call_command("rotate_secrets_key", stdout=io.StringIO())
    out = io.StringIO()
    call_command("rotate_secrets_key", "--check", stdout=out)
    assert "Every stored secret is under the newest key." in out.getvalue()


def test_a_secret_no_key_decrypts_is_left_as_it_is_and_named(settings, under_old_key):
    settings.REACH_SECRETS_KEYS = ["lost-key"]
    secret_set(name="ORPHAN", value="orphan-value-123456")
    orphan = Secret.objects.get(name="ORPHAN").ciphertext
    settings.REACH_SECRETS_KEYS = ["new-key", "old-key"]
    with pytest.raises(CommandError, match="decrypts ORPHAN"):
        call_command("rotate_secrets_key", stdout=io.StringIO())
    assert Secret.objects.get(name="ORPHAN").ciphertext == orphan
    assert readable_with(settings, ["new-key"]) == set(VALUES)
    assert kinds()[-1] == AuditKind.SECRETS_ROTATION_INCOMPLETE
    # With its key back in the keyring, running again finishes.
    settings.REACH_SECRETS_KEYS = ["new-key", "old-key", "lost-key"]
    call_command("rotate_secrets_key", stdout=io.StringIO())
    assert kinds()[-1] == AuditKind.SECRETS_ROTATED
    settings.REACH_SECRETS_KEYS = ["new-key"]
    assert secret_value("ORPHAN") == "orphan-value-123456"


def test_generate_key_prints_a_new_random_key():
    first, second = io.StringIO(), io.StringIO()
    call_command("rotate_secrets_key", "--generate-key", stdout=first)
    call_command("rotate_secrets_key", "--generate-key", stdout=second)
    assert len(first.getvalue().strip()) >= 40
    assert first.getvalue() != second.getvalue()
