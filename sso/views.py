"""The two pages of a sign-in: off to the provider, and back with a code.

mozilla-django-oidc's views make the state, the nonce and the PKCE verifier
and keep them in the session (start), and log the user in (callback). These
subclasses read the provider from ``sso.config`` instead of settings, and turn
every refusal into a message on the login page and an audit event, where the
library would answer a bare 400 or send the browser to "/".
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.contrib import auth, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.generic import View
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from accounts.policy import PROVIDER_SESSION_KEY
from sso.config import Provider, enabled, provider, provider_name
from sso.errors import RefusalReason, SSORefused
from sso.services import sso_refusal_record

logger = logging.getLogger(__name__)

#: Seconds between leaving for the provider and coming back that a sign-in may take.
STATE_MAX_AGE_S = 600
#: The session key that says this session was signed in by the provider (its
#: issuer): the provider did the second factor (accounts.policy).
SESSION_ISSUER = PROVIDER_SESSION_KEY


def _refuse(request: HttpRequest, refusal: SSORefused) -> HttpResponse:
    """Audit the refusal and show its message on the login page."""
    logger.warning("sso sign-in refused: %s: %s", refusal.reason, refusal.message)
    sso_refusal_record(
        reason=refusal.reason,
        issuer=str(settings.REACH_OIDC_ISSUER),
        detail=refusal.message,
    )
    messages.error(request, f"Sign-in with {provider_name()} failed: {refusal.message}")
    return HttpResponseRedirect(settings.LOGIN_URL)


class _ProviderSettings:
    """The library's ``get_settings``, answered from the provider first."""

    sso_provider: Provider

    def get_settings(self, attr: str, *args: Any) -> Any:
        values = self.sso_provider.library_settings()
        if attr in values:
            return values[attr]
        return import_from_settings(attr, *args)


class SSOStart(_ProviderSettings, OIDCAuthenticationRequestView):
    """``GET /oidc/authenticate/?next=…``: off to the provider's authorize page."""

    def __init__(self, **kwargs: Any) -> None:
        # Not the library's __init__: it reads the endpoints from settings.
        View.__init__(self, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            self.sso_provider = provider()
        except SSORefused as refusal:
            return _refuse(request, refusal)
        self.OIDC_OP_AUTH_ENDPOINT = self.sso_provider.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = self.sso_provider.client_id
        return super().get(request)


class SSOCallback(_ProviderSettings, OIDCAuthenticationCallbackView):
    """``GET /oidc/callback/?code=…&state=…``: the provider sends the browser back."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            self.sso_provider = provider()
            return self._sign_in(request)
        except SSORefused as refusal:
            return _refuse(request, refusal)

    def _sign_in(self, request: HttpRequest) -> HttpResponse:
        name = self.sso_provider.name
        states = request.session.get("oidc_states")
        states = states if isinstance(states, dict) else {}
        state = request.GET.get("state", "")
        if request.GET.get("error"):
            # Spent, whatever the provider said: a replay finds nothing. The
            # provider's words are shown only for a sign-in this browser started:
            # anyone can make a link that carries ?error_description=.
            if states.pop(state, None) is None:
                raise SSORefused(
                    RefusalReason.BAD_STATE,
                    "This sign-in was not started in this browser (unknown state).",
                )
            request.session.save()
            error = request.GET["error"][:100]
            description = request.GET.get("error_description", "")[:300]
            raise SSORefused(
                RefusalReason.PROVIDER_ERROR,
                f"{name} answered {error!r}"
                + (f": {description}" if description else "."),
            )
        if not state or not request.GET.get("code"):
            raise SSORefused(
                RefusalReason.BAD_STATE,
                "The provider's answer lacks its code or state; start again.",
            )
        entry = states.pop(state, None)
        if not isinstance(entry, dict) or not entry.get("nonce"):
            raise SSORefused(
                RefusalReason.BAD_STATE,
                "This sign-in was not started in this browser, or was already "
                "used (unknown state); start again.",
            )
        request.session.save()
        if time.time() - float(entry.get("added_on") or 0) > STATE_MAX_AGE_S:
            raise SSORefused(
                RefusalReason.BAD_STATE,
                f"The sign-in took longer than {STATE_MAX_AGE_S // 60} minutes; "
                "start again.",
            )
        # As the library does: read the session again after the slow exchange,
        # so what another tab changed meanwhile is not overwritten.
        request.session = request.session.__class__(request.session.session_key)
        user = auth.authenticate(
            request=request,
            nonce=entry.get("nonce"),
            code_verifier=entry.get("code_verifier"),
        )
        if user is None or not user.is_active:
            raise SSORefused(
                RefusalReason.INACTIVE, "The account may not sign in here."
            )
        self.user = user
        response = self.login_success()
        request.session[SESSION_ISSUER] = self.sso_provider.issuer
        return response
