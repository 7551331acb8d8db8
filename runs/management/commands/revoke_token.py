from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.api.auth import token_revoke
from runs.models import ApiToken


class Command(BaseCommand):
    help = "Revoke an API token (give the token, or its printed prefix)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("token")

    def handle(self, *args: Any, **options: Any) -> None:
        value = options["token"]
        token = (
            ApiToken.objects.filter(key_hash=ApiToken.hash_key(value)).first()
            or ApiToken.objects.filter(prefix=value[:12]).first()
        )
        if token is None:
            raise CommandError("No such token.")
        if token.revoked_at is not None:
            self.stdout.write("Already revoked.")
            return
        token_revoke(token=token)
        self.stdout.write(f"Revoked {token.prefix}… of {token.user.get_username()}.")
