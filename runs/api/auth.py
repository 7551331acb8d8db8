"""Bearer tokens for programs (``Authorization: Bearer <token>``)."""

from __future__ import annotations

import secrets
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from runs.models import ApiToken

TOKEN_PREFIX = "reach_"


def token_issue(*, user: Any, name: str = "") -> tuple[ApiToken, str]:
    """Create a token for ``user``; return it and the raw key (shown once)."""
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, key_hash=ApiToken.hash_key(key), prefix=key[:12]
    )
    return token, key


def token_revoke(*, token: ApiToken) -> None:
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        try:
            key = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Malformed token.") from exc
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=ApiToken.hash_key(key), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        now = timezone.now()
        if (
            token.last_used_at is None
            or (now - token.last_used_at).total_seconds() > 60
        ):
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return self.keyword
