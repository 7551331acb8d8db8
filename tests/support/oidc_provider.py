"""A small but real OpenID Connect provider on loopback, for the single sign-on tests.

It speaks the authorization code flow as a provider must: a discovery document,
its public keys (JWKS), an authorize endpoint that checks the client and the
redirect URI and sends the browser back with a one-time code, a token endpoint
that checks the client's secret (Basic or in the body), the code, its redirect
URI and the PKCE verifier and answers with an RS256 id_token signed by joserfc,
and a userinfo endpoint behind the access token. Whoever is "signed in at the
provider" (``sign_in_as``) is approved at once, as a provider with a live
session does.

``misbehave`` makes the next tokens wrong in one way (another issuer, another
key, expired, another nonce, another audience), for the tests that must see
them refused. The ``oidc_provider`` fixture starts one and stops it after the
test; ``sso_settings`` and ``sso_env`` point the product at it.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from joserfc import jwt
from joserfc.jwk import KeySet, OctKey, RSAKey

from sso.config import forget_discovery
from tests.support.http_servers import Hit, LocalServer, Reply, redirect
from tests.support.lifecycle import Started

CLIENT_ID = "agent-reach"
CLIENT_SECRET = "test-oidc-client-secret-5f1c"
PROVIDER_NAME = "Test IdP"
#: The groups mapping the tests configure.
GROUP_MAP = "idp-approvers=approvers,idp-ops=operators,idp-audit=auditors"
#: The redirect URI of the Django test client's requests.
TEST_CLIENT_CALLBACK = "http://testserver/oidc/callback/"


def rsa_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(
        2048, parameters={"kid": kid, "alg": "RS256", "use": "sig"}
    )


@dataclass
class Grant:
    """What an issued code stands for."""

    claims: dict[str, Any]
    nonce: str | None
    redirect_uri: str
    code_challenge: str | None
    code_challenge_method: str | None


@dataclass
class Misbehaviour:
    """How the next id_tokens are wrong (``None``/``0``: not in that way)."""

    issuer: str | None = None
    audience: str | list[str] | None = None
    key: RSAKey | OctKey | None = None
    algorithm: str | None = None
    lifetime_s: int | None = None
    nonce: str | None = None
    userinfo: dict[str, Any] = field(default_factory=dict)


class OIDCProvider(Started):
    """An OpenID provider at ``issuer`` (``http://127.0.0.1:<port>``)."""

    def __init__(
        self,
        *,
        client_id: str = CLIENT_ID,
        client_secret: str = CLIENT_SECRET,
        redirect_uris: list[str] | None = None,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.redirect_uris = list(redirect_uris or [TEST_CLIENT_CALLBACK])
        #: How clients may send their secret; one not listed is refused.
        self.token_auth_methods = ["client_secret_basic", "client_secret_post"]
        self.key = rsa_key("key-1")
        self.user: dict[str, Any] | None = None
        self.bad = Misbehaviour()
        self._lock = threading.Lock()
        self._codes: dict[str, Grant] = {}
        self._tokens: dict[str, dict[str, Any]] = {}
        self.server = LocalServer(self._respond)

    # -- the test's side -------------------------------------------------------

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    @property
    def issuer(self) -> str:
        return self.server.url("").rstrip("/")

    @property
    def hits(self) -> list[Hit]:
        return self.server.hits

    def sign_in_as(
        self,
        *,
        sub: str,
        email: str,
        email_verified: Any = True,
        groups: list[str] | None = None,
        **claims: Any,
    ) -> None:
        """Who the provider approves at its authorize endpoint from now on."""
        user: dict[str, Any] = {
            "sub": sub,
            "email": email,
            "email_verified": email_verified,
            "name": claims.pop("name", email.split("@")[0].title()),
            **claims,
        }
        if groups is not None:
            user["groups"] = groups
        if email_verified is None:
            del user["email_verified"]
        self.user = user

    def misbehave(self, **how: Any) -> None:
        """Make the next tokens wrong in the ways named (``Misbehaviour``'s fields)."""
        self.bad = Misbehaviour(**how)

    # -- the provider's side ---------------------------------------------------

    def _respond(self, hit: Hit) -> Reply:
        routes = {
            ("GET", "/.well-known/openid-configuration"): self._discovery,
            ("GET", "/jwks"): self._jwks,
            ("GET", "/authorize"): self._authorize,
            ("POST", "/token"): self._token,
            ("GET", "/userinfo"): self._userinfo,
        }
        handler = routes.get((hit.method, hit.path))
        if hit.path.endswith("/.well-known/openid-configuration"):
            # Asked under another issuer's path, it still names its own.
            handler = self._discovery
        if handler is None:
            return Reply(status=404, data={"error": "not_found"})
        return handler(hit)

    def _discovery(self, hit: Hit) -> Reply:
        base = self.issuer
        return Reply(
            data={
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "userinfo_endpoint": f"{base}/userinfo",
                "jwks_uri": f"{base}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid", "email", "profile", "groups"],
                "token_endpoint_auth_methods_supported": self.token_auth_methods,
                "code_challenge_methods_supported": ["S256"],
                "claims_supported": ["sub", "email", "email_verified", "groups"],
            }
        )

    def _jwks(self, hit: Hit) -> Reply:
        return Reply(data=KeySet([self.key]).as_dict(private=False))

    def _authorize(self, hit: Hit) -> Reply:
        query = {name: values[0] for name, values in hit.query.items()}
        if query.get("client_id") != self.client_id:
            return Reply(status=400, text="unknown client_id")
        redirect_uri = query.get("redirect_uri", "")
        if redirect_uri not in self.redirect_uris:
            # Never redirect to an unregistered address (RFC 6749 4.1.2.1).
            return Reply(status=400, text=f"unregistered redirect_uri {redirect_uri}")
        state = query.get("state", "")
        if (
            query.get("response_type") != "code"
            or "openid" not in query.get("scope", "").split()
        ):
            return redirect(
                self._back(redirect_uri, error="invalid_request", state=state)
            )
        if self.user is None:
            return redirect(
                self._back(redirect_uri, error="access_denied", state=state)
            )
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = Grant(
                claims=dict(self.user),
                nonce=query.get("nonce"),
                redirect_uri=redirect_uri,
                code_challenge=query.get("code_challenge"),
                code_challenge_method=query.get("code_challenge_method"),
            )
        return redirect(self._back(redirect_uri, code=code, state=state))

    @staticmethod
    def _back(redirect_uri: str, **params: str) -> str:
        joiner = "&" if urlsplit(redirect_uri).query else "?"
        return redirect_uri + joiner + urlencode(params)

    def _client_authenticated(self, hit: Hit, form: dict[str, str]) -> bool:
        header = hit.headers.get("authorization", "")
        method = "client_secret_basic" if header else "client_secret_post"
        if method not in self.token_auth_methods:
            return False
        if header.startswith("Basic "):
            decoded = base64.b64decode(header.removeprefix("Basic ")).decode()
            client_id, _, secret = decoded.partition(":")
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        return client_id == self.client_id and secrets.compare_digest(
            secret, self.client_secret
        )

    def _token(self, hit: Hit) -> Reply:
        form = {k: v[0] for k, v in parse_qs(hit.body.decode()).items()}
        if not self._client_authenticated(hit, form):
            return Reply(status=401, data={"error": "invalid_client"})
        if form.get("grant_type") != "authorization_code":
            return Reply(status=400, data={"error": "unsupported_grant_type"})
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)
        if grant is None or grant.redirect_uri != form.get("redirect_uri"):
            return Reply(status=400, data={"error": "invalid_grant"})
        if grant.code_challenge is not None:
            verifier = form.get("code_verifier", "")
            digest = hashlib.sha256(verifier.encode("ascii")).digest()
            challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            if (
                grant.code_challenge_method != "S256"
                or challenge != grant.code_challenge
            ):
                return Reply(status=400, data={"error": "invalid_grant"})
        access_token = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[access_token] = {**grant.claims, **self.bad.userinfo}
        return Reply(
            data={
                "access_token": access_token,
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": self.id_token(grant),
            },
            headers={"Cache-Control": "no-store"},
        )

    def id_token(self, grant: Grant) -> str:
        """The grant's id_token, as signed now (wrong where ``misbehave`` said)."""
        now = int(time.time())
        bad = self.bad
        lifetime = bad.lifetime_s if bad.lifetime_s is not None else 300
        claims = {
            **grant.claims,
            "iss": bad.issuer or self.issuer,
            "aud": bad.audience or self.client_id,
            "iat": now if lifetime > 0 else now + lifetime - 60,
            "exp": now + lifetime,
            "auth_time": now,
        }
        nonce = bad.nonce or grant.nonce
        if nonce is not None:
            claims["nonce"] = nonce
        key = bad.key or self.key
        algorithm = bad.algorithm or "RS256"
        header = {"alg": algorithm, "kid": key.kid or "key-1", "typ": "JWT"}
        return jwt.encode(header, claims, key, algorithms=[algorithm])

    def _userinfo(self, hit: Hit) -> Reply:
        token = hit.headers.get("authorization", "").removeprefix("Bearer ")
        with self._lock:
            claims = self._tokens.get(token)
        if claims is None:
            return Reply(
                status=401,
                data={"error": "invalid_token"},
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return Reply(data=claims)


@pytest.fixture
def oidc_provider() -> Iterator[OIDCProvider]:
    """A started local OpenID provider; stopped (and its discovery forgotten) after."""
    provider = OIDCProvider().start()
    forget_discovery()
    try:
        yield provider
    finally:
        provider.stop()
        forget_discovery()


def sso_settings(provider: OIDCProvider, **overrides: Any) -> dict[str, Any]:
    """Django settings (for ``override_settings``) that sign in through ``provider``."""
    return {
        "REACH_OIDC_ISSUER": provider.issuer,
        "REACH_OIDC_CLIENT_ID": provider.client_id,
        "REACH_OIDC_ENABLED": True,
        "REACH_OIDC_PROVIDER_NAME": PROVIDER_NAME,
        "REACH_OIDC_GROUP_MAP": GROUP_MAP,
        "AUTHENTICATION_BACKENDS": [
            "django.contrib.auth.backends.ModelBackend",
            "sso.backend.SSOBackend",
        ],
        **overrides,
    }


def sso_env(provider: OIDCProvider) -> dict[str, str]:
    """The environment of a web process that signs in through ``provider``."""
    return {
        "REACH_OIDC_ISSUER": provider.issuer,
        "REACH_OIDC_CLIENT_ID": provider.client_id,
        "REACH_SECRET_OIDC_CLIENT_SECRET": provider.client_secret,
        "REACH_OIDC_PROVIDER_NAME": PROVIDER_NAME,
        "REACH_OIDC_GROUP_MAP": GROUP_MAP,
    }


@dataclass(frozen=True)
class Callback:
    """Where the provider sent the browser back, and what the product answered."""

    url: str  # path and query of the callback, as the browser requested it
    response: Any


def sign_in_through(
    client: Any, provider: OIDCProvider, next_url: str = "/"
) -> Callback:
    """The whole code flow with Django's test ``client`` as the browser.

    The client starts the sign-in, the provider's authorize endpoint is asked
    over real HTTP (it answers with a redirect back), and the client follows it
    to the callback, whose answer is returned (the product then talks to the
    provider's token, JWKS and userinfo endpoints itself).
    """
    start = client.get("/oidc/authenticate/", {"next": next_url})
    assert start.status_code == 302, start
    authorize = start["Location"]
    assert authorize.startswith(provider.issuer + "/authorize?"), authorize
    answer = requests.get(authorize, allow_redirects=False, timeout=10)
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["Location"])
    url = f"{back.path}?{back.query}"
    return Callback(url=url, response=client.get(url))
