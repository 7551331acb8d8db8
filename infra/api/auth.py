"""The session side of the API's authentication (the bearer tokens for programs
are ``runs.api.auth``'s, beside their model)."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions

#: What a person should do when a form or request of a page opened under an
#: older session is refused (they logged out, or in again, in another tab).
STALE_PAGE = (
    "This page was opened under a session that has since ended or changed (a "
    "log-out or a new log-in in another tab). Reload the page, then send it again."
)


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's, refusing a stale CSRF token with what to do (:data:`STALE_PAGE`)
    rather than "CSRF Failed: …", which tells a person nothing."""

    def enforce_csrf(self, request: Any) -> None:
        try:
            super().enforce_csrf(request)
        except exceptions.PermissionDenied as exc:
            raise exceptions.PermissionDenied(STALE_PAGE) from exc
