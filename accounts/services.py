"""Sign-in services: the second factor, unlocking, logging out everywhere.

Every change of a user's sign-in state is audited (``auth.*``). The second
factor is django-otp's: a TOTP device (an authenticator app) and a static device
holding the recovery codes, each code good once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone
from django_otp.models import VerifyNotAllowed
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import throttle
from audit.models import AuditKind
from audit.services import audit_append
from infra.errors import ServiceError
from infra.push import push, user_group

#: How many recovery codes a user gets at a time.
RECOVERY_CODES = 10
TOTP_NAME = "authenticator"
RECOVERY_NAME = "recovery codes"


class SecondFactorError(ServiceError):
    """A code refused, or a second-factor change that cannot be made."""


def _audit_user(kind: AuditKind, user: Any, *, actor: Any, data: Any = None) -> None:
    audit_append(
        kind=kind,
        actor=actor,
        object_type="user",
        object_id=user.get_username(),
        data=data,
    )


# -- the second factor ---------------------------------------------------------


def totp_pending(*, user: Any) -> TOTPDevice:
    """The authenticator being set up (unconfirmed): the same one until it is
    confirmed, so a reload shows the same secret."""
    device = (
        TOTPDevice.objects.filter(user=user, confirmed=False).order_by("pk").first()
    )
    if device is None:
        device = TOTPDevice.objects.create(user=user, name=TOTP_NAME, confirmed=False)
    return device


def totp_confirm(*, user: Any, code: str) -> list[str]:
    """Confirm the pending authenticator with a code it shows; it replaces any
    earlier one, and new recovery codes are issued (returned, shown once)."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first()
    if device is None:
        raise SecondFactorError("Start the set-up again: no authenticator is waiting.")
    code = _digits(code)
    with transaction.atomic():
        locked = TOTPDevice.objects.select_for_update().get(pk=device.pk)
        refused = _totp_check(locked, code)
        if not refused:
            TOTPDevice.objects.filter(user=user).exclude(pk=locked.pk).delete()
            locked.confirmed = True
            locked.save(update_fields=["confirmed"])
            codes = _issue_recovery_codes(user)
            _audit_user(AuditKind.AUTH_2FA_ENABLED, user, actor=user)
    # Raised outside the transaction: the throttle's count of the failure stays.
    if refused:
        raise SecondFactorError(refused)
    return codes


def recovery_codes_regenerate(*, user: Any) -> list[str]:
    """New recovery codes (the old ones stop working); returned, shown once."""
    if not TOTPDevice.objects.filter(user=user, confirmed=True).exists():
        raise SecondFactorError("Turn two-factor authentication on first.")
    with transaction.atomic():
        codes = _issue_recovery_codes(user)
    return codes


def _issue_recovery_codes(user: Any) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    device = StaticDevice.objects.create(user=user, name=RECOVERY_NAME, confirmed=True)
    codes = [StaticToken.random_token() for _ in range(RECOVERY_CODES)]
    StaticToken.objects.bulk_create(StaticToken(device=device, token=c) for c in codes)
    _audit_user(
        AuditKind.AUTH_RECOVERY_CODES_ISSUED,
        user,
        actor=user,
        data={"count": len(codes)},
    )
    return codes


def second_factor_disable(*, user: Any, by: Any) -> None:
    """Remove the user's authenticator and recovery codes (the user, or an admin
    for a user who lost both)."""
    with transaction.atomic():
        removed = TOTPDevice.objects.filter(user=user).delete()[0]
        removed += StaticDevice.objects.filter(user=user).delete()[0]
        _audit_user(
            AuditKind.AUTH_2FA_DISABLED,
            user,
            actor=by,
            data={"by_admin": getattr(by, "pk", None) != user.pk},
        )


@dataclass(frozen=True)
class Verified:
    """A code accepted: the device that took it (for ``django_otp.login``)."""

    device: Any
    recovery: bool
    recovery_left: int = 0


def code_verify(*, user: Any, code: str) -> Verified:
    """Check a code from the user's authenticator, or one of their recovery codes.

    A TOTP code is good once (django-otp keeps the last time step it accepted and
    takes only later ones) within a step either side of now; a recovery code is
    deleted as it is used. Wrong codes make each device wait longer before the
    next try (django-otp's throttling). Raises :class:`SecondFactorError` saying
    why a code was refused: wrong, used already, or too soon after wrong ones.
    """
    cleaned = "".join(str(code or "").split()).lower()
    if not cleaned:
        raise SecondFactorError("Enter the code from your authenticator app.")
    verified: Verified | None = None
    with transaction.atomic():
        if cleaned.isdigit():
            device = (
                TOTPDevice.objects.select_for_update()
                .filter(user=user, confirmed=True)
                .first()
            )
            if device is None:
                raise SecondFactorError("Your account has no authenticator.")
            refused = _totp_check(device, cleaned)
            if not refused:
                verified = Verified(device=device, recovery=False)
        else:
            static = (
                StaticDevice.objects.select_for_update()
                .filter(user=user, confirmed=True)
                .first()
            )
            if static is None:
                raise SecondFactorError("Your account has no recovery codes.")
            refused = _throttle_message(static)
            if not refused and static.verify_token(cleaned):
                left = static.token_set.count()
                _audit_user(
                    AuditKind.AUTH_RECOVERY_CODE_USED,
                    user,
                    actor=user,
                    data={"left": left},
                )
                verified = Verified(device=static, recovery=True, recovery_left=left)
            elif not refused:
                refused = (
                    "That recovery code is not one of yours, or it was used already."
                )
    # Raised outside the transaction: the throttle's count of the failure stays.
    if verified is None:
        raise SecondFactorError(refused)
    return verified


def _digits(code: str) -> str:
    return "".join(str(code or "").split())


def _throttle_message(device: Any) -> str:
    """Why the device takes no code now ("" when it does)."""
    allowed, info = device.verify_is_allowed()
    if allowed:
        return ""
    if info and info.get("reason") is VerifyNotAllowed.N_FAILED_ATTEMPTS:
        until = info.get("locked_until")
        wait = (
            max(1, math.ceil((until - timezone.now()).total_seconds())) if until else 1
        )
        return (
            f"Too many wrong codes: wait {throttle.wait_text(wait)} before trying "
            "the next one."
        )
    return "Codes from this device are not accepted now."


def _totp_check(device: TOTPDevice, code: str) -> str:
    """Verify ``code`` on ``device`` (inside the caller's transaction); why it was
    refused, or "" when it was accepted."""
    throttled = _throttle_message(device)
    if throttled:
        return throttled
    if device.verify_token(code):
        return ""
    if _was_used(device, code):
        return (
            "That code was used already. Wait for your app to show the next one "
            "(a new code every 30 seconds)."
        )
    return "That code is not right. Check the time on your device, then try again."


def _was_used(device: TOTPDevice, code: str) -> bool:
    """Whether ``code`` is one the device accepted before (at or before last_t)."""
    try:
        token = int(code)
    except ValueError:
        return False
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time()
    for offset in range(-device.tolerance, device.tolerance + 1):
        totp.drift = device.drift + offset
        if totp.t() <= device.last_t and totp.token() == token:
            return True
    return False


# -- throttling ----------------------------------------------------------------


def login_unlock(
    *, by: Any, username: str | None = None, address: str | None = None
) -> int:
    """Clear the failed-login counters of an account and/or an address (audited);
    returns how many were set."""
    if not username and not address:
        raise ServiceError("Name an account, an address, or both.")
    cleared = throttle.counters_clear(username=username, address=address)
    audit_append(
        kind=AuditKind.AUTH_UNLOCKED,
        actor=by,
        object_type="user" if username else "address",
        object_id=username or address or "",
        data={"username": username or "", "address": address or "", "cleared": cleared},
    )
    return cleared


def audit_lockout(
    sender: Any, request: Any, username: str | None, ip_address: str | None, **_: Any
) -> None:
    """Receiver of axes' ``user_locked_out`` (connected in ``AccountsConfig.ready``):
    sent once, when a counter reaches its limit."""
    name = (username or "").removeprefix(throttle.ACCOUNT_PREFIX)
    counter = getattr(request, "reach_lockout_counter", throttle.Counter.ACCOUNT)
    audit_append(
        kind=AuditKind.AUTH_LOCKED_OUT,
        actor="anonymous",
        object_type="user" if counter is throttle.Counter.ACCOUNT else "address",
        object_id=name if counter is throttle.Counter.ACCOUNT else ip_address or "",
        data={
            "counter": str(counter),
            "username": name,
            "address": ip_address or "",
            "minutes": int(throttle.cool_off().total_seconds() // 60),
        },
    )


# -- sessions ------------------------------------------------------------------


def sessions_end_all(*, user: Any, by: Any) -> int:
    """End every session of ``user`` (this one too, when it is theirs) and close
    their open websockets; returns how many sessions ended.

    The sessions are rows of the database session store, found by the user id
    they carry. The sockets of those sessions are told to close through the
    channel layer (``user_<id>``, the group each session socket joins), so every
    web process closes its own within moments. Bearer tokens are not sessions:
    they stay valid until revoked (``revoke_token``).
    """
    ended = 0
    wanted = str(user.pk)
    with transaction.atomic():
        for session in Session.objects.filter(
            expire_date__gt=timezone.now()
        ).iterator():
            if str(session.get_decoded().get(SESSION_KEY)) == wanted:
                session.delete()
                ended += 1
        _audit_user(
            AuditKind.AUTH_SESSIONS_ENDED,
            user,
            actor=by,
            data={"sessions": ended, "by_admin": getattr(by, "pk", None) != user.pk},
        )
        message = {"type": "session.ended"}
        transaction.on_commit(lambda: push(user_group(user.pk), message))
    return ended
