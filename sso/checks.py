"""System checks: a half-configured provider is an error at start-up, not at login."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

from sso.config import SIGN_ALGOS, GroupMap


def check_settings(app_configs: Any = None, **_: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    issuer = settings.REACH_OIDC_ISSUER
    client_id = settings.REACH_OIDC_CLIENT_ID
    if bool(issuer) != bool(client_id):
        missing = "REACH_OIDC_CLIENT_ID" if issuer else "REACH_OIDC_ISSUER"
        errors.append(
            Error(
                f"Single sign-on is half configured: {missing} is not set.",
                hint="Set both REACH_OIDC_ISSUER and REACH_OIDC_CLIENT_ID, or neither.",
                id="sso.E001",
            )
        )
    try:
        GroupMap.parse(settings.REACH_OIDC_GROUP_MAP)
    except ValueError as exc:
        errors.append(Error(str(exc), id="sso.E002"))
    if settings.REACH_OIDC_SIGN_ALGO not in SIGN_ALGOS:
        errors.append(
            Error(
                f"REACH_OIDC_SIGN_ALGO {settings.REACH_OIDC_SIGN_ALGO!r} is not one "
                f"of {', '.join(sorted(SIGN_ALGOS))}.",
                id="sso.E003",
            )
        )
    return errors
