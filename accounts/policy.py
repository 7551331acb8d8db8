"""Who must have a second factor, and why an action is refused without one.

``REACH_REQUIRE_2FA`` names the roles (``approvers``, ``admins``). A user in such
a role must have confirmed an authenticator (a TOTP device) before acting in it;
a browser session must also have passed the second factor (every login asks for
it once a device exists; a session from before the device existed has not).
A bearer token is not a session: its holder needs the device, never a code per
request (docs/api.md "Authentication and permissions").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.models import Device
from django_otp.plugins.otp_totp.models import TOTPDevice

#: The approver's permission, by name (approvals sits above this app and checks
#: it itself, as ``approvals.services.DECIDE_PERMISSION``).
APPROVER_PERMISSION = "approvals.decide_approval"
#: Where a user turns the second factor on (``accounts.urls``' ``two-factor``).
ENROL_PATH = "/accounts/two-factor/"
#: Where a session that has not passed its second factor passes it.
VERIFY_PATH = "/accounts/login/code/"
#: The session key a sign-in through the identity provider sets (single sign-on,
#: ``sso.views``; its value is the issuer): the provider did the second factor,
#: so such a session needs no authenticator here (README "Single sign-on").
PROVIDER_SESSION_KEY = "sso_issuer"


class Role(StrEnum):
    """The roles ``REACH_REQUIRE_2FA`` may name."""

    APPROVERS = "approvers"
    ADMINS = "admins"


def required_roles() -> frozenset[Role]:
    """The roles that must have a second factor (a setting, no query)."""
    names = [str(name).strip().lower() for name in settings.REACH_REQUIRE_2FA]
    unknown = [name for name in names if name not in Role.__members__.values()]
    if unknown:
        accepted = ", ".join(role.value for role in Role)
        raise ImproperlyConfigured(
            f"REACH_REQUIRE_2FA names {', '.join(unknown)}: it takes a comma-separated "
            f"list of {accepted}."
        )
    return frozenset(Role(name) for name in names if name)


def roles_of(user: Any) -> list[Role]:
    """The roles ``user`` holds that may require a second factor."""
    if not getattr(user, "is_authenticated", False):
        return []
    held = []
    if user.has_perm(APPROVER_PERMISSION):
        held.append(Role.APPROVERS)
    if user.is_staff or user.is_superuser:
        held.append(Role.ADMINS)
    return held


def required_for(user: Any) -> list[Role]:
    """The roles for which ``user`` must have a second factor."""
    required = required_roles()
    if not required:
        return []
    return [role for role in roles_of(user) if role in required]


def has_second_factor(user: Any) -> bool:
    """Whether ``user`` has a confirmed authenticator (recovery codes alone are not
    one: they come with it and go with it)."""
    if not getattr(user, "is_authenticated", False):
        return False
    return TOTPDevice.objects.filter(user_id=user.pk, confirmed=True).exists()


def mark_provider_sign_in(user: Any, session: Any) -> None:
    """Mark ``user`` as signed in by the identity provider when ``session`` says so
    (``ProviderSignInMiddleware`` for pages and the API, the approvals socket for
    its cards): :func:`refusal` then asks for no second factor of its own."""
    if session is not None and session.get(PROVIDER_SESSION_KEY):
        user.second_factor_by_provider = True


def session_verified(user: Any) -> bool | None:
    """Whether the session ``user`` came with passed its second factor: django-otp's
    ``is_verified`` (``OTPMiddleware``); None for a user with no session behind
    it (a bearer token's, a worker's)."""
    is_verified = getattr(user, "is_verified", None)
    return bool(is_verified()) if callable(is_verified) else None


ACTIONS = {
    Role.APPROVERS: "Deciding approvals",
    Role.ADMINS: "The admin",
}


@dataclass(frozen=True)
class Refusal:
    """Why an action waits for a second factor, and where to get past it."""

    message: str
    url: str
    link_text: str

    def __str__(self) -> str:
        return self.message


def refusal(user: Any, *, role: Role, verified: bool | None = None) -> Refusal | None:
    """Why ``user`` may not act as ``role`` for want of a second factor; None when
    they may (always, when the role does not require one).

    ``verified`` says whether the user's session passed the second factor; by
    default it is read from the user (:func:`session_verified`).
    """
    if role not in required_roles():
        return None
    if getattr(user, "second_factor_by_provider", False):
        return None
    action = ACTIONS[role]
    if not has_second_factor(user):
        return Refusal(
            f"{action} needs two-factor authentication, and your account has none "
            f"yet: set it up at {ENROL_PATH}.",
            ENROL_PATH,
            "Set up two-factor authentication",
        )
    if verified is None:
        verified = session_verified(user)
    if verified is False:
        return Refusal(
            f"{action} needs two-factor authentication, and this session has not "
            f"passed it: enter a code at {VERIFY_PATH}.",
            VERIFY_PATH,
            "Enter a code",
        )
    return None


def session_passed(session: Any, user: Any) -> bool:
    """Whether ``session`` (a websocket's, from its scope) passed the second
    factor with a confirmed device of ``user``: what ``OTPMiddleware`` reads for a
    page."""
    persistent_id = session.get(DEVICE_ID_SESSION_KEY) if session is not None else None
    if not persistent_id:
        return False
    device = Device.from_persistent_id(persistent_id)
    return bool(device is not None and device.user_id == user.pk and device.confirmed)
