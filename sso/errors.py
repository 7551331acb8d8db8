"""Why a sign-in through the provider was refused, and the refusal itself."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from infra.errors import ErrorKind, ServiceError


class RefusalReason(StrEnum):
    """What was wrong with a sign-in: recorded in the audit event as ``reason``."""

    NOT_CONFIGURED = "not_configured"  # single sign-on off, or no client secret
    PROVIDER_ERROR = "provider_error"  # the provider answered ?error=…
    PROVIDER_UNREACHABLE = "provider_unreachable"  # discovery, token, JWKS, userinfo
    BAD_STATE = "bad_state"  # a callback this browser did not start
    BAD_NONCE = "bad_nonce"  # an id_token minted for another sign-in
    BAD_TOKEN = "bad_token"  # malformed, or a claim missing
    BAD_SIGNATURE = "bad_signature"  # not signed by a key the provider publishes
    WRONG_ISSUER = "wrong_issuer"
    WRONG_AUDIENCE = "wrong_audience"
    EXPIRED = "expired"
    EMAIL_UNVERIFIED = "email_unverified"
    BAD_CLAIMS = "bad_claims"  # userinfo of another subject, groups not a list
    AMBIGUOUS_EMAIL = "ambiguous_email"  # several users, or another identity's
    NO_ACCOUNT = "no_account"  # unknown and REACH_OIDC_CREATE_USERS is off
    INACTIVE = "inactive"


class SSORefused(ServiceError):
    """A sign-in refused: ``message`` is shown on the login page, ``reason`` audited.

    Not a ``SuspiciousOperation``: mozilla-django-oidc swallows those into a bare
    failure, and the login page must say what went wrong.
    """

    default_kind: ClassVar[ErrorKind] = ErrorKind.FORBIDDEN

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
