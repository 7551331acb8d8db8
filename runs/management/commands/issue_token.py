from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs.api.auth import token_issue


class Command(BaseCommand):
    help = "Print a new API token for USERNAME (alone on the last line)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label for the token.")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}.")
        token, key = token_issue(user=user, name=options["name"])
        self.stderr.write(
            f"Token {token.prefix}… for {user.get_username()} "
            "(shown once; use it as 'Authorization: Bearer <token>'):"
        )
        self.stdout.write(key)
