"""Bearer tokens for programs (``Authorization: Bearer <token>``).

The same tokens open the websockets (``Sec-WebSocket-Protocol: bearer, <token>``,
runs/consumers.py) and the event stream (runs/api/stream.py); :func:`token_user`
is the one check all three make.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone
from rest_framework import authentication, exceptions

from infra.push import push
from runs.models import ApiToken

TOKEN_PREFIX = "reach_"
#: What a socket's or a stream's group receives when the identity behind it ends
#: (a session logged out, a token revoked); the consumers' ``session_ended``.
SESSION_ENDED = "session.ended"


def token_group(token_id: object) -> str:
    """The group of the sockets and streams opened with one token."""
    return f"token_{token_id}"


def token_issue(*, user: Any, name: str = "") -> tuple[ApiToken, str]:
    """Create a token for ``user``; return it and the raw key (shown once)."""
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, key_hash=ApiToken.hash_key(key), prefix=key[:12]
    )
    return token, key


def token_revoke(*, token: ApiToken) -> None:
    """Revoke ``token``; after commit, close the sockets and streams it opened."""
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    group = token_group(token.pk)
    transaction.on_commit(lambda: push(group, {"type": SESSION_ENDED}))


def token_user(key: str) -> tuple[Any, ApiToken] | None:
    """The active user holding the unrevoked token ``key``, and the token; None
    for anything else. Records the use (at most once a minute, so a busy
    program does not write on every call)."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=ApiToken.hash_key(key), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user, token


def token_still_valid(token_id: int) -> bool:
    """Whether the token is unrevoked and its user active (long-lived streams
    check again now and then, in case the push of a revocation was lost)."""
    return ApiToken.objects.filter(
        pk=token_id, revoked_at__isnull=True, user__is_active=True
    ).exists()


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
        found = token_user(key)
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        return found

    def authenticate_header(self, request: Any) -> str:
        return self.keyword
