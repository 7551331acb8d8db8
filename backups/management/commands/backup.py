"""``manage.py backup PATH``: the whole database into one checked archive."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from backups.services import (
    BackupError,
    backup_create,
    keys_to_keep,
    pg_dump_command,
    vendor,
)


class Command(BaseCommand):
    help = (
        "Back the database up into PATH while the product runs: SQLite's online "
        "backup API, or pg_dump --format=custom on PostgreSQL, in a zip archive "
        "with a manifest that manage.py restore checks. README: 'Backups'."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", help="The archive to write (e.g. reach.backup).")
        parser.add_argument(
            "--force", action="store_true", help="Replace PATH if it exists."
        )
        parser.add_argument(
            "--print",
            action="store_true",
            dest="print_only",
            help="PostgreSQL: only print the pg_dump command line to run by hand.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        try:
            kind = vendor()
            if kind == "postgresql":
                self.stdout.write(
                    "PostgreSQL: the backup is pg_dump's custom format, one "
                    "consistent snapshot (the product may keep running):"
                )
                if options["print_only"]:
                    self.stdout.write("  " + " ".join(pg_dump_command(path)))
                    self.stdout.write(
                        "Restore such a bare dump with pg_restore --no-owner "
                        "--dbname … into an empty database, then manage.py migrate."
                    )
                    self._keep()
                    return
            backup = backup_create(
                path=path,
                actor=f"{getpass.getuser()} (manage.py backup)",
                force=options["force"],
            )
        except BackupError as error:
            raise CommandError(str(error)) from None
        manifest = backup.manifest
        if backup.command:
            self.stdout.write(
                "  ran (into the archive as database.pgdump): "
                + " ".join(backup.command)
            )
        self.stdout.write(
            f"Backed up {kind} ({manifest.size} bytes, sha256 {manifest.sha256[:16]}…, "
            f"{manifest.audit.get('events')} audit events, "
            f"{sum(len(names) for names in manifest.migrations.values())} "
            f"migrations) into {backup.path}"
        )
        self._keep()

    def _keep(self) -> None:
        self.stdout.write("Keep besides the backup, and apart from it:")
        for line in keys_to_keep():
            self.stdout.write(f"  - {line}")
