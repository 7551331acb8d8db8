"""``manage.py unlock_login [--user NAME] [--address IP]``: clear failed-login
counts (audited as ``auth.unlocked``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import login_unlock


class Command(BaseCommand):
    help = "Clear the failed-login counts of an account and/or an address."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="the user name typed at the login")
        parser.add_argument("--address", help="the client's network address")

    def handle(self, *args: Any, **options: Any) -> None:
        username, address = options.get("user"), options.get("address")
        if not username and not address:
            raise CommandError("Give --user NAME, --address IP, or both.")
        cleared = login_unlock(by="manage.py", username=username, address=address)
        what = " and ".join(
            part
            for part in (
                f"account {username!r}" if username else "",
                f"address {address}" if address else "",
            )
            if part
        )
        self.stdout.write(f"Unlocked {what} ({cleared} count(s) cleared).")
