"""Single sign-on against the local OpenID provider (tests/support/oidc_provider.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from registry.secrets import secret_set
from tests.support.oidc_provider import OIDCProvider, sso_settings


@pytest.fixture
def idp(oidc_provider: OIDCProvider, demo: Any) -> Iterator[OIDCProvider]:
    """The provider, the product configured for it (the client secret in the
    secret store), and the demo's groups and cast."""
    secret_set(name="OIDC_CLIENT_SECRET", value=oidc_provider.client_secret)
    with override_settings(**sso_settings(oidc_provider)):
        yield oidc_provider
