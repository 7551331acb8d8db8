"""``manage.py restore PATH``: a backup of ``manage.py backup`` into this install."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from backups.archive import BackupFileError, read_manifest
from backups.services import BackupError, backup_restore, missing_keys


class Command(BaseCommand):
    help = (
        "Restore a backup of manage.py backup into this install's database (stop "
        "the product first). Refuses a truncated or corrupted file, a backup "
        "newer than this code, and a database that holds data unless --force; "
        "migrates an older backup forward. README: 'Backups'."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", help="The archive manage.py backup wrote.")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Replace a database that already holds data.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        try:
            manifest = read_manifest(path)
        except BackupFileError as error:
            raise CommandError(
                f"{path} is not a usable backup: {error}. Nothing was restored."
            ) from None
        self.stdout.write(
            f"Backup of Agent Reach {manifest.version} ({manifest.vendor}), made "
            f"{manifest.created_at}, {manifest.audit.get('events')} audit events."
        )
        for key in missing_keys(manifest):
            self.stderr.write(
                f"Warning: {manifest.secrets_keys[key]} stored secret(s) were "
                f"encrypted with key {key}, which this install's keyring lacks: "
                "set REACH_SECRETS_KEY (or REACH_SECRETS_OLD_KEYS) to the backed-up "
                "install's key, or they cannot be read."
            )
        try:
            restored = backup_restore(
                path=path,
                actor=f"{getpass.getuser()} (manage.py restore)",
                force=options["force"],
            )
        except BackupError as error:
            raise CommandError(str(error)) from None
        if restored.migrated:
            self.stdout.write(f"Migrated forward: {', '.join(restored.migrated)}")
        self.stdout.write(
            f"Restored. The audit chain verifies ({restored.audit_events} events, "
            "the restore recorded in it)."
        )
        if restored.undecryptable:
            self.stderr.write(
                "Warning: no key of the keyring decrypts the stored secrets "
                f"{', '.join(restored.undecryptable)}."
            )
        self.stdout.write(
            "Start the product: runs that were running when the backup was taken "
            "resume once their lease expires (beat re-queues them); parked "
            "approvals wait in the queue."
        )
