"""A session signed in through the identity provider counts as having passed the
second factor (the provider did it): what the pages and the API then see of the
user (``accounts.policy.mark_provider_sign_in``)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from accounts.policy import PROVIDER_SESSION_KEY, mark_provider_sign_in


class ProviderSignInMiddleware:
    """After ``OTPMiddleware``: a provider's session is verified."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        session = getattr(request, "session", None)
        if session is not None and session.get(PROVIDER_SESSION_KEY):
            user = request.user
            if user.is_authenticated:
                mark_provider_sign_in(user, session)
                user.is_verified = lambda: True  # type: ignore[union-attr]
        return self.get_response(request)
