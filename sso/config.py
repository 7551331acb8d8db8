"""The provider as configured: the settings, the discovery document, the group map.

Nothing here runs at import time. Discovery (``<issuer>/.well-known/openid-
configuration``) is fetched the first time a sign-in needs it and kept for an
hour per process; a failed fetch is not kept, so the next sign-in tries again.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings

from sso.errors import RefusalReason, SSORefused

#: Seconds a discovery document is kept before it is fetched again.
DISCOVERY_TTL_S = 3600.0
#: Signature algorithms an id_token may use (never "none", never HMAC with the
#: client secret: a leaked secret must not mint tokens).
SIGN_ALGOS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
)
#: The callback's route name: the redirect URI to register is its absolute URL.
CALLBACK_ROUTE = "sso-callback"
#: The secret (registry/secrets.py) that holds the client secret.
CLIENT_SECRET_NAME = "OIDC_CLIENT_SECRET"


@dataclass(frozen=True)
class GroupMap:
    """Provider groups to product groups: ``idp-ops=operators`` pairs.

    Only the product groups it names are managed; every other group of a user is
    left alone.
    """

    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> GroupMap:
        """``"a=x,b=y"``; a ValueError names the first entry it cannot read."""
        pairs: list[tuple[str, str]] = []
        for entry in (item.strip() for item in text.split(",")):
            if not entry:
                continue
            source, sep, target = (part.strip() for part in entry.partition("="))
            if not sep or not source or not target:
                raise ValueError(
                    f"REACH_OIDC_GROUP_MAP entry {entry!r} is not "
                    "provider-group=product-group"
                )
            pairs.append((source, target))
        return cls(tuple(pairs))

    @property
    def managed(self) -> frozenset[str]:
        """The product groups this map adds users to and removes them from."""
        return frozenset(target for _, target in self.pairs)

    def granted(self, provider_groups: Iterable[str]) -> frozenset[str]:
        """The product groups that these provider groups give."""
        have = set(provider_groups)
        return frozenset(target for source, target in self.pairs if source in have)


@dataclass(frozen=True)
class Provider:
    """Everything a sign-in needs to know about the OpenID provider."""

    name: str
    issuer: str
    client_id: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str
    scopes: str
    sign_algo: str
    groups_claim: str
    email_verified_claim: str
    group_map: GroupMap
    create_users: bool
    timeout_s: float
    #: client_secret_basic (an Authorization header) unless the provider says it
    #: takes only client_secret_post.
    token_basic_auth: bool = True

    def library_settings(self) -> dict[str, Any]:
        """mozilla-django-oidc's settings, from this provider."""
        return {
            "OIDC_OP_AUTHORIZATION_ENDPOINT": self.authorization_endpoint,
            "OIDC_OP_TOKEN_ENDPOINT": self.token_endpoint,
            "OIDC_OP_USER_ENDPOINT": self.userinfo_endpoint,
            "OIDC_OP_JWKS_ENDPOINT": self.jwks_uri,
            "OIDC_RP_CLIENT_ID": self.client_id,
            "OIDC_RP_SIGN_ALGO": self.sign_algo,
            "OIDC_RP_SCOPES": self.scopes,
            "OIDC_USE_NONCE": True,
            "OIDC_USE_PKCE": True,
            "OIDC_VERIFY_KID": True,
            "OIDC_TIMEOUT": self.timeout_s,
            "OIDC_TOKEN_USE_BASIC_AUTH": self.token_basic_auth,
            "OIDC_AUTHENTICATION_CALLBACK_URL": CALLBACK_ROUTE,
            "OIDC_STORE_ACCESS_TOKEN": False,
            "OIDC_STORE_ID_TOKEN": False,
            "OIDC_CREATE_USER": self.create_users,
            # Never accept an unsigned token, whatever the settings module says.
            "OIDC_ALLOW_UNSECURED_JWT": False,
        }


def enabled() -> bool:
    """Whether single sign-on is configured (a flag: no query, no request)."""
    return bool(getattr(settings, "REACH_OIDC_ENABLED", False))


def provider_name() -> str:
    return str(settings.REACH_OIDC_PROVIDER_NAME)


_cache_lock = threading.Lock()
_discovered: dict[tuple[str, float], tuple[float, dict[str, Any]]] = {}


def forget_discovery() -> None:
    """Drop every kept discovery document (the tests' providers come and go)."""
    with _cache_lock:
        _discovered.clear()


def _discover(issuer: str, timeout_s: float) -> dict[str, Any]:
    key = (issuer, timeout_s)
    now = time.monotonic()
    with _cache_lock:
        kept = _discovered.get(key)
    if kept is not None and now - kept[0] < DISCOVERY_TTL_S:
        return kept[1]
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=timeout_s)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise SSORefused(
            RefusalReason.PROVIDER_UNREACHABLE,
            f"The sign-in provider could not be reached ({url}): {exc}",
        ) from exc
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        found = document.get("issuer") if isinstance(document, dict) else None
        raise SSORefused(
            RefusalReason.PROVIDER_UNREACHABLE,
            f"The provider at {url} calls itself {found!r}, not {issuer!r}: set "
            "REACH_OIDC_ISSUER to exactly its issuer.",
        )
    with _cache_lock:
        _discovered[key] = (now, document)
    return document


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint(name: str, configured: str, document: dict[str, Any]) -> str:
    url = configured or str(document.get(name) or "")
    if not url:
        raise SSORefused(
            RefusalReason.PROVIDER_UNREACHABLE,
            f"The provider publishes no {name}; set REACH_OIDC_{name.upper()}.",
        )
    parts = urlsplit(url)
    if parts.scheme != "https" and not (
        parts.scheme == "http" and _is_loopback(parts.hostname or "")
    ):
        raise SSORefused(
            RefusalReason.PROVIDER_UNREACHABLE,
            f"The provider's {name} {url!r} is not https (only loopback may be "
            "plain http).",
        )
    return url


def provider() -> Provider:
    """The configured provider, its endpoints discovered where not set.

    Raises :class:`SSORefused` (``provider_unreachable``) when discovery fails or
    an endpoint is missing or not https.
    """
    issuer = str(settings.REACH_OIDC_ISSUER)
    timeout_s = float(settings.REACH_OIDC_TIMEOUT_S)
    explicit = {
        "authorization_endpoint": settings.REACH_OIDC_AUTHORIZATION_ENDPOINT,
        "token_endpoint": settings.REACH_OIDC_TOKEN_ENDPOINT,
        "userinfo_endpoint": settings.REACH_OIDC_USERINFO_ENDPOINT,
        "jwks_uri": settings.REACH_OIDC_JWKS_URI,
    }
    document = {} if all(explicit.values()) else _discover(issuer, timeout_s)
    endpoints = {
        name: _endpoint(name, str(value or ""), document)
        for name, value in explicit.items()
    }
    methods = document.get("token_endpoint_auth_methods_supported") or [
        "client_secret_basic"
    ]
    return Provider(
        name=provider_name(),
        issuer=issuer,
        client_id=str(settings.REACH_OIDC_CLIENT_ID),
        scopes=str(settings.REACH_OIDC_SCOPES),
        sign_algo=str(settings.REACH_OIDC_SIGN_ALGO),
        groups_claim=str(settings.REACH_OIDC_GROUPS_CLAIM),
        email_verified_claim=str(settings.REACH_OIDC_EMAIL_VERIFIED_CLAIM),
        group_map=GroupMap.parse(str(settings.REACH_OIDC_GROUP_MAP)),
        create_users=bool(settings.REACH_OIDC_CREATE_USERS),
        timeout_s=timeout_s,
        token_basic_auth="client_secret_basic" in methods,
        **endpoints,
    )
