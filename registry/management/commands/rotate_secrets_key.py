"""``manage.py rotate_secrets_key``: re-encrypt every stored secret under the
newest key of ``REACH_SECRETS_KEY`` / ``REACH_SECRETS_OLD_KEYS``."""

from __future__ import annotations

import getpass
import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from registry.secrets import (
    configured_key_ids,
    current_key_id,
    secrets_by_key,
    secrets_rotate,
)


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret under the newest secrets key "
        "(REACH_SECRETS_KEY), decrypting with any of the keyring "
        "(REACH_SECRETS_OLD_KEYS too). Safe to run while the product runs, safe "
        "to run again: an interrupted rotation resumes. README: 'Rotating the "
        "secrets key'."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--check",
            action="store_true",
            help="Only report which key encrypts how many secrets; exit 1 while "
            "any is not under the newest key.",
        )
        parser.add_argument(
            "--generate-key",
            action="store_true",
            help="Print a new random key for REACH_SECRETS_KEY and exit.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["generate_key"]:
            self.stdout.write(secrets.token_urlsafe(32))
            return
        newest = current_key_id()
        ids = configured_key_ids()
        self.stdout.write(
            f"keyring: {', '.join(ids)} (newest first; new secrets use {newest})"
        )
        counts = secrets_by_key()
        for recorded, count in sorted(counts.items()):
            name = recorded or "(not recorded)"
            where = (
                "newest"
                if recorded == newest
                else ("in the keyring" if recorded in ids else "not in the keyring")
            )
            self.stdout.write(f"  {name}: {count} secret(s), {where}")
        if options["check"]:
            behind = sum(n for recorded, n in counts.items() if recorded != newest)
            if behind:
                raise CommandError(
                    f"{behind} secret(s) are not under the newest key {newest}: "
                    "run manage.py rotate_secrets_key."
                )
            self.stdout.write("Every stored secret is under the newest key.")
            return
        rotation = secrets_rotate(
            actor=f"{getpass.getuser()} (manage.py rotate_secrets_key)",
            on_rotated=lambda name: self.stdout.write(f"rotated {name}"),
        )
        self.stdout.write(
            f"{len(rotation.rotated)} secret(s) re-encrypted under {newest}, "
            f"{rotation.already} already were."
        )
        if rotation.undecryptable:
            raise CommandError(
                "No key of the keyring decrypts "
                f"{', '.join(rotation.undecryptable)}: they are left as they are. "
                "Add the key they were encrypted with to REACH_SECRETS_OLD_KEYS "
                "and run this again (or set them anew in the admin)."
            )
        self.stdout.write(
            "Done. Once every process runs with this keyring, the old keys may "
            "leave REACH_SECRETS_OLD_KEYS."
        )
