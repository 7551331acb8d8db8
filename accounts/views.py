"""Sign-in pages: the login and its second step, two-factor set-up and upkeep,
logging out everywhere.

The login takes the password first (throttled by axes: a refused login is the
same page saying why and how long to wait). A user with an authenticator is not
logged in yet: the session remembers who passed the password for a few minutes,
and ``/accounts/login/code/`` asks for a code from the authenticator or a
recovery code; a wrong code counts as a failed login.
"""

from __future__ import annotations

import time
from base64 import b32encode
from typing import Any

import django_otp
import segno
from django.contrib import messages
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth import login as auth_login
from django.contrib.auth import logout as auth_logout
from django.contrib.auth.decorators import login_required
from django.contrib.auth.signals import user_login_failed
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods
from django_otp.plugins.otp_static.models import StaticToken

from accounts import policy, services, throttle
from accounts.services import SecondFactorError

#: The session key that holds who passed the password, waiting for their code.
PENDING = "reach_2fa_pending"
#: Seconds a passed password waits for its code.
PENDING_S = 300


def _safe_next(request: HttpRequest, candidate: str | None) -> str:
    if candidate and url_has_allowed_host_and_scheme(
        candidate,
        allowed_hosts={request.get_host()},
        require_https=request.is_secure(),
    ):
        return candidate
    return "/"


class ReachLoginView(LoginView):
    """The password step; a user with an authenticator goes on to the code."""

    redirect_authenticated_user = True

    def form_valid(self, form: Any) -> HttpResponse:
        user = form.get_user()
        if not policy.has_second_factor(user):
            return super().form_valid(form)
        self.request.session[PENDING] = {
            "user": user.pk,
            "backend": user.backend,
            "at": time.time(),
            "next": self.get_success_url(),
        }
        return redirect("login-code")


def _pending_user(request: HttpRequest) -> tuple[Any, dict[str, Any]] | None:
    pending = request.session.get(PENDING)
    if not isinstance(pending, dict) or time.time() - pending.get("at", 0) > PENDING_S:
        request.session.pop(PENDING, None)
        return None
    user = get_user_model().objects.filter(pk=pending["user"], is_active=True).first()
    return None if user is None else (user, pending)


@require_http_methods(["GET", "POST"])
def login_code(request: HttpRequest) -> HttpResponse:
    """The second step: a code from the authenticator, or a recovery code.

    Also where a logged-in session that has not passed its second factor (one
    from before the authenticator was set up) passes it.
    """
    pending: dict[str, Any] | None = None
    if request.user.is_authenticated:
        user = request.user
        target = _safe_next(
            request, request.GET.get("next") or request.POST.get("next")
        )
        if request.user.is_verified():
            return redirect(target)
        if not policy.has_second_factor(user):
            return redirect(f"{reverse('two-factor')}?{urlencode({'next': target})}")
    else:
        found = _pending_user(request)
        if found is None:
            messages.info(request, "Log in again: the code was not entered in time.")
            return redirect("login")
        user, pending = found
        target = _safe_next(request, pending.get("next"))

    context: dict[str, Any] = {"next": target, "username": user.get_username()}
    lockout = throttle.current_lockout(request, user.get_username())
    if lockout is not None:
        context["error"] = lockout.message
        return render(request, "accounts/login_code.html", context, status=429)
    if request.method != "POST":
        return render(request, "accounts/login_code.html", context)
    try:
        verified = services.code_verify(user=user, code=request.POST.get("code", ""))
    except SecondFactorError as exc:
        # Counted like a wrong password (per account and address) and audited.
        user_login_failed.send(
            sender=__name__,
            credentials={"username": user.get_username(), "stage": "second_factor"},
            request=request,
        )
        context["error"] = str(exc)
        return render(request, "accounts/login_code.html", context, status=400)
    if pending is not None:
        request.session.pop(PENDING, None)
        auth_login(request, user, backend=pending["backend"])
    django_otp.login(request, verified.device)
    if verified.recovery:
        messages.warning(
            request,
            f"You logged in with a recovery code; {verified.recovery_left} left. "
            "Each works once: make new ones on the two-factor page if you run low.",
        )
    return redirect(target)


def _qr_svg(config_url: str) -> str:
    """The otpauth:// URL as an inline SVG (segno draws paths, no text)."""
    return segno.make(config_url, error="m").svg_inline(
        scale=4, dark="#111", light="#fff", omitsize=False
    )


def _spaced(secret: str) -> str:
    return " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))


@login_required
@require_http_methods(["GET", "POST"])
def two_factor(request: HttpRequest) -> HttpResponse:
    """Turn the second factor on (scan, confirm with a code, keep the recovery
    codes shown once); when on, new recovery codes or off, after the password
    and a code again."""
    user = request.user
    target = _safe_next(request, request.GET.get("next") or request.POST.get("next"))
    enabled = policy.has_second_factor(user)
    context: dict[str, Any] = {
        "enabled": enabled,
        "required_for": policy.required_for(user),
        "next": target,
    }
    action = request.POST.get("action") if request.method == "POST" else None
    status = 200
    if enabled:
        context["recovery_left"] = StaticToken.objects.filter(
            device__user=user, device__confirmed=True
        ).count()
        if action in ("regenerate", "disable"):
            try:
                _reauthenticate(request)
                if action == "regenerate":
                    codes = services.recovery_codes_regenerate(user=user)
                    return _show_codes(request, codes, target, fresh=False)
                services.second_factor_disable(user=user, by=user)
                messages.success(request, "Two-factor authentication is off.")
                return redirect("two-factor")
            except SecondFactorError as exc:
                context["error"] = str(exc)
                context["error_for"] = action
                status = 400
    else:
        if action == "confirm":
            try:
                codes = services.totp_confirm(
                    user=user, code=request.POST.get("code", "")
                )
            except SecondFactorError as exc:
                context["error"] = str(exc)
                context["error_for"] = action
                status = 400
            else:
                device = user.totpdevice_set.get(confirmed=True)
                # This session has just shown a code: it counts as verified.
                django_otp.login(request, device)
                return _show_codes(request, codes, target, fresh=True)
        device = services.totp_pending(user=user)
        secret = b32encode(device.bin_key).decode()
        context["qr_svg"] = mark_safe(_qr_svg(device.config_url))  # noqa: S308
        context["secret"] = _spaced(secret)
    return render(request, "accounts/two_factor.html", context, status=status)


def _reauthenticate(request: HttpRequest) -> None:
    """The password (throttled and audited like a login) and a code again."""
    user = request.user
    checked = authenticate(
        request,
        username=user.get_username(),
        password=request.POST.get("password", ""),
    )
    if checked is None or checked.pk != user.pk:
        raise SecondFactorError("That password is not right.")
    try:
        services.code_verify(user=user, code=request.POST.get("code", ""))
    except SecondFactorError:
        user_login_failed.send(
            sender=__name__,
            credentials={"username": user.get_username(), "stage": "second_factor"},
            request=request,
        )
        raise


def _show_codes(
    request: HttpRequest, codes: list[str], target: str, *, fresh: bool
) -> HttpResponse:
    response = render(
        request,
        "accounts/recovery_codes.html",
        {"codes": codes, "next": target, "fresh": fresh},
    )
    # Shown once: never kept by a cache or the browser's history.
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_http_methods(["GET", "POST"])
def sessions(request: HttpRequest) -> HttpResponse:
    """Log out everywhere: every session of this user ends, this one too."""
    if request.method == "POST":
        user = request.user
        ended = services.sessions_end_all(user=user, by=user)
        auth_logout(request)
        messages.success(
            request,
            f"Logged out everywhere: {ended} session{'s' if ended != 1 else ''} ended.",
        )
        return redirect("login")
    return render(request, "accounts/sessions.html", {})
