"""Backups between installs of their own (each its own var directory and
database, run as ``manage.py`` processes): an older backup is migrated forward,
and the secrets key a backup needs is named when it is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import ROOT

pytestmark = [pytest.mark.integration]


def install(tmp_path: Path, name: str, **env: str) -> dict[str, str]:
    var = tmp_path / name
    var.mkdir()
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_URL", "REACH_SECRETS", "DJANGO_SECRET"))
    }
    environment.update(
        DATABASE_URL=f"sqlite:///{var / 'reach.sqlite3'}",
        REACH_VAR_DIR=str(var),
        REACH_SEED_DEMO="0",
        **env,
    )
    return environment


def manage(env: dict[str, str], *args: str, ok: bool = True) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if ok:
        assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


SET_SECRET = (
    "from registry.secrets import secret_set; "
    "secret_set(name='CRM_TOKEN', value='crm-value-123456')"
)
READ_SECRET = (
    "from registry.secrets import secret_value; print(secret_value('CRM_TOKEN'))"
)


def test_an_older_backup_is_migrated_forward_on_restore(tmp_path: Path):
    old = install(tmp_path, "old", DJANGO_SECRET_KEY="key-of-old")
    manage(old, "migrate", "-v0")
    manage(old, "shell", "-c", SET_SECRET)
    # The install as it was before the secrets' key ids.
    manage(old, "migrate", "registry", "0004_list_prices", "-v0")
    archive = tmp_path / "old.backup"
    manage(old, "backup", str(archive))

    new = install(tmp_path, "new", DJANGO_SECRET_KEY="key-of-old")
    out = manage(new, "restore", str(archive))
    # Among them (apps whose migrations need the registry's later ones, such as
    # guardrails, are rolled back with it and come forward too).
    [migrated] = [
        line for line in out.splitlines() if line.startswith("Migrated forward: ")
    ]
    assert "registry.0005_secret_key_id" in migrated.split(": ", 1)[1].split(", ")
    assert "Restored. The audit chain verifies" in out
    assert "crm-value-123456" in manage(new, "shell", "-c", READ_SECRET)
    assert "The hash chain is intact." in manage(new, "verify_audit")


def test_a_restore_names_the_secrets_key_it_lacks(tmp_path: Path):
    source = install(tmp_path, "source", DJANGO_SECRET_KEY="source-django-key")
    manage(source, "migrate", "-v0")
    manage(source, "shell", "-c", SET_SECRET)
    archive = tmp_path / "source.backup"
    said = manage(source, "backup", str(archive))
    assert "REACH_SECRETS_KEY is not set" in said

    # Another Django key, and no secrets key: the secrets cannot be read.
    lacking = install(tmp_path, "lacking", DJANGO_SECRET_KEY="other-key")
    out = manage(lacking, "restore", str(archive))
    assert "Restored." in out
    assert "which this install's keyring lacks" in out
    assert "no key of the keyring decrypts the stored secrets CRM_TOKEN" in out
    assert "None" in manage(lacking, "shell", "-c", READ_SECRET)

    # The source's key kept as the secrets key: they can.
    keeping = install(
        tmp_path,
        "keeping",
        DJANGO_SECRET_KEY="other-key",
        REACH_SECRETS_KEY="source-django-key",
    )
    out = manage(keeping, "restore", str(archive))
    assert "Restored." in out and "keyring lacks" not in out
    assert "crm-value-123456" in manage(keeping, "shell", "-c", READ_SECRET)
