"""The authentication backend: mozilla-django-oidc's code flow, checked strictly.

The library exchanges the code (with the PKCE verifier), fetches the provider's
keys and the userinfo. This subclass adds what it leaves out or lets through:
the id_token's issuer, audience, expiry and required claims are checked (the
library checks neither issuer nor audience, and lets an expired token's error
escape as a crash); every failure becomes an :class:`SSORefused` that says what
was wrong; the user is found or made by ``sso.services.sso_sign_in``.
"""

from __future__ import annotations

from typing import Any

import jwt
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from registry.secrets import secret_value
from sso.config import CLIENT_SECRET_NAME, Provider, enabled, provider
from sso.errors import RefusalReason, SSORefused
from sso.services import sso_sign_in

#: Seconds of clock difference with the provider that ``exp`` and ``iat`` allow.
LEEWAY_S = 30
#: Claims an id_token must carry (OpenID Connect Core 2).
REQUIRED_CLAIMS = ["iss", "sub", "aud", "exp", "iat"]


class SSOBackend(OIDCAuthenticationBackend):
    """Signs in the user of an OpenID Connect callback; nothing else.

    Listed in AUTHENTICATION_BACKENDS only when single sign-on is configured.
    It answers only the callback's ``authenticate(request, nonce=…,
    code_verifier=…)``: a password login never reaches the provider. It grants
    no permissions of its own (ModelBackend does that for every user).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__: Django makes a backend for each request
        # whose session it signed in (get_user), and that one reads the
        # provider's endpoints. Here they are read when a sign-in needs them.
        self.UserModel = get_user_model()
        self._provider: Provider | None = None

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            self._provider = provider()
        return self._provider

    def get_settings(self, attr: str, *args: Any) -> Any:  # type: ignore[override]
        values = self.provider.library_settings()
        if attr in values:
            return values[attr]
        return import_from_settings(attr, *args)

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        if request is None or "nonce" not in kwargs or not enabled():
            return None
        settings = self.provider.library_settings()
        self.OIDC_OP_TOKEN_ENDPOINT = settings["OIDC_OP_TOKEN_ENDPOINT"]
        self.OIDC_OP_USER_ENDPOINT = settings["OIDC_OP_USER_ENDPOINT"]
        self.OIDC_OP_JWKS_ENDPOINT = settings["OIDC_OP_JWKS_ENDPOINT"]
        self.OIDC_RP_CLIENT_ID = settings["OIDC_RP_CLIENT_ID"]
        self.OIDC_RP_SIGN_ALGO = settings["OIDC_RP_SIGN_ALGO"]
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_RP_CLIENT_SECRET = secret_value(CLIENT_SECRET_NAME) or ""
        if not self.OIDC_RP_CLIENT_SECRET:
            raise SSORefused(
                RefusalReason.NOT_CONFIGURED,
                "Single sign-on has no client secret: set "
                f"REACH_SECRET_{CLIENT_SECRET_NAME} or add the secret "
                f"{CLIENT_SECRET_NAME} under Admin → Secrets.",
            )
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            answered = getattr(exc, "response", None) is not None
            raise SSORefused(
                RefusalReason.PROVIDER_ERROR
                if answered
                else RefusalReason.PROVIDER_UNREACHABLE,
                f"{self.provider.name} refused the sign-in: {_why(exc)}"
                if answered
                else f"{self.provider.name} could not be reached: {_why(exc)}",
            ) from exc

    def verify_token(self, token: Any, **kwargs: Any) -> dict[str, Any]:
        """The id_token's claims, or SSORefused: signature by a published key of
        the expected algorithm, issuer, audience, expiry, required claims, and
        (for the id_token, called with ``nonce=``) the nonce of this sign-in."""
        name = self.provider.name
        if isinstance(token, bytes):
            token = token.decode("ascii", errors="replace")
        if not isinstance(token, str) or not token:
            raise SSORefused(RefusalReason.BAD_TOKEN, f"{name} sent no id_token.")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise SSORefused(
                RefusalReason.BAD_TOKEN, f"{name}'s token is not a JWT: {exc}"
            ) from exc
        algo = self.provider.sign_algo
        if header.get("alg") != algo:
            raise SSORefused(
                RefusalReason.BAD_SIGNATURE,
                f"{name}'s token is signed with {header.get('alg')!r}, not {algo}.",
            )
        if not isinstance(header.get("kid"), str):
            raise SSORefused(
                RefusalReason.BAD_TOKEN, f"{name}'s token names no signing key (kid)."
            )
        try:
            key = self.retrieve_matching_jwk(token)
        except SuspiciousOperation as exc:
            raise SSORefused(
                RefusalReason.BAD_SIGNATURE,
                f"{name}'s token is signed by a key {name} does not publish "
                f"(kid {header['kid']!r}).",
            ) from exc
        except (KeyError, TypeError, jwt.PyJWKError) as exc:
            raise SSORefused(
                RefusalReason.PROVIDER_UNREACHABLE,
                f"{name}'s key set (JWKS) is malformed: {exc!r}",
            ) from exc
        payload = self._decode(token, key)
        if "nonce" in kwargs and payload.get("nonce") != kwargs["nonce"]:
            raise SSORefused(
                RefusalReason.BAD_NONCE,
                f"{name}'s token was issued for another sign-in (nonce mismatch).",
            )
        return payload

    def _decode(self, token: str, key: Any) -> dict[str, Any]:
        name = self.provider.name
        issuer, client_id = self.provider.issuer, self.provider.client_id
        try:
            payload: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[self.provider.sign_algo],
                audience=client_id,
                issuer=issuer,
                leeway=LEEWAY_S,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError as exc:
            raise SSORefused(
                RefusalReason.EXPIRED,
                f"{name}'s token has expired; check this server's clock and sign "
                "in again.",
            ) from exc
        except jwt.InvalidIssuerError as exc:
            raise SSORefused(
                RefusalReason.WRONG_ISSUER,
                f"The token comes from another issuer, not {issuer}.",
            ) from exc
        except jwt.InvalidAudienceError as exc:
            raise SSORefused(
                RefusalReason.WRONG_AUDIENCE,
                f"The token was issued to another client, not {client_id}.",
            ) from exc
        except jwt.InvalidSignatureError as exc:
            raise SSORefused(
                RefusalReason.BAD_SIGNATURE,
                f"{name}'s token signature does not verify.",
            ) from exc
        except jwt.InvalidTokenError as exc:
            raise SSORefused(
                RefusalReason.BAD_TOKEN, f"{name}'s token is not valid: {exc}"
            ) from exc
        audience = payload["aud"]
        if isinstance(audience, list) and len(audience) > 1:
            # OpenID Connect Core 3.1.3.7: several audiences need azp = us.
            if payload.get("azp") != client_id:
                raise SSORefused(
                    RefusalReason.WRONG_AUDIENCE,
                    f"The token was issued to another client, not {client_id}.",
                )
        return payload

    def get_userinfo(
        self, access_token: Any, id_token: Any, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """The id_token's claims with the userinfo's over them, of one subject."""
        info = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub") != payload.get("sub"):
            raise SSORefused(
                RefusalReason.BAD_CLAIMS,
                f"{self.provider.name}'s userinfo describes another subject than "
                "its token.",
            )
        return {**payload, **info}

    def get_or_create_user(
        self, access_token: Any, id_token: Any, payload: dict[str, Any]
    ) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        return sso_sign_in(provider=self.provider, claims=claims).user

    def get_user(self, user_id: Any) -> Any:
        # ModelBackend's: an inactive user's session ends.
        return ModelBackend.get_user(self, user_id)

    # Permissions are ModelBackend's alone: asking this backend again would only
    # repeat its answer.
    def get_user_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return set()

    def get_group_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return set()

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return set()

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return False

    def has_module_perms(self, user_obj: Any, app_label: str) -> bool:
        return False

    def with_perm(self, perm: Any, *args: Any, **kwargs: Any) -> Any:
        return self.UserModel._default_manager.none()


def _why(exc: requests.RequestException) -> str:
    """The status, the address and the OAuth error code; never the whole body."""
    response = getattr(exc, "response", None)
    if response is None:
        return type(exc).__name__
    why = f"HTTP {response.status_code} from {response.url}"
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    return f"{why} ({error})" if isinstance(error, str) else why
