"""Login throttling: django-axes, counting failed logins in the shared Redis cache.

Each failed login (a wrong password, or a wrong second-factor code) adds one to
two counters: the account's (the user name typed, whether or not such a user
exists, so the counts say nothing about who exists) and the client address's.
Each has its own limit (``REACH_LOGIN_FAILURES_PER_ACCOUNT``, ``…_PER_ADDRESS``):
a counter at its limit locks that account, or that address, until
``REACH_LOGIN_LOCKOUT_MINUTES`` after its latest counted failure. A login tried
while locked is refused before the password is checked and is not counted, so it
neither tells a guesser anything nor makes the wait longer. The counters are
Redis keys with that expiry, one count across every web process.

axes calls the hooks here by name from the settings (``AXES_*``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from axes.handlers.cache import AxesCacheHandler
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cache_timeout, get_client_cache_keys
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

#: Keeps an account's key apart from an address's (axes hashes the bare value,
#: and a user name may be spelled like an address).
ACCOUNT_PREFIX = "account:"


class Counter(StrEnum):
    """What a lockout is about: the order of ``AXES_LOCKOUT_PARAMETERS``."""

    ACCOUNT = "account"
    ADDRESS = "address"


@dataclass(frozen=True)
class Lockout:
    """Why a login is refused, and for how many more seconds."""

    counter: Counter
    wait_s: int

    @property
    def message(self) -> str:
        about = (
            "for this account"
            if self.counter is Counter.ACCOUNT
            else "from your network address"
        )
        return (
            f"Too many failed logins {about}. Wait {wait_text(self.wait_s)} and try "
            "again, or ask an admin to unlock it."
        )


def wait_text(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def limits() -> dict[Counter, int]:
    return {
        Counter.ACCOUNT: settings.REACH_LOGIN_FAILURES_PER_ACCOUNT,
        Counter.ADDRESS: settings.REACH_LOGIN_FAILURES_PER_ADDRESS,
    }


def failure_limit(request: Any, credentials: Any) -> int:
    """``AXES_FAILURE_LIMIT``: the account's (the handler applies both limits)."""
    return settings.REACH_LOGIN_FAILURES_PER_ACCOUNT


def cool_off(request: Any = None) -> timedelta:
    """``AXES_COOLOFF_TIME``."""
    return timedelta(minutes=settings.REACH_LOGIN_LOCKOUT_MINUTES)


def account_key_name(username: str) -> str:
    return f"{ACCOUNT_PREFIX}{username}"


def client_username(request: Any, credentials: dict[str, Any] | None) -> str | None:
    """``AXES_USERNAME_CALLABLE``: the typed user name, as the account's counter."""
    if credentials:
        name = credentials.get("username")
    else:
        data = getattr(request, "data", None) or getattr(request, "POST", {})
        name = data.get("username")
    return account_key_name(str(name)) if name else None


def client_address(request: Any) -> str:
    """``AXES_CLIENT_IP_CALLABLE``: the socket's peer; behind the TLS proxy
    (``REACH_BEHIND_TLS_PROXY``), the address the proxy appended last to
    ``X-Forwarded-For`` (what a client sends there itself comes before it)."""
    meta = getattr(request, "META", {})
    if settings.BEHIND_TLS_PROXY:
        forwarded = [
            part.strip()
            for part in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")
            if part.strip()
        ]
        if forwarded:
            return forwarded[-1]
    return str(meta.get("REMOTE_ADDR") or "")


class LoginThrottleHandler(AxesCacheHandler):
    """axes' cache handler with a limit per counter instead of one for all."""

    def counters(
        self, request: Any, credentials: dict[str, Any] | None
    ) -> list[tuple[Counter, str, int]]:
        """(counter, cache key, limit), in ``AXES_LOCKOUT_PARAMETERS`` order."""
        keys = get_client_cache_keys(request, credentials)
        limit = limits()
        return [
            (counter, key, limit[counter])
            for counter, key in zip(Counter, keys, strict=True)
        ]

    def lockout(
        self, request: Any, credentials: dict[str, Any] | None
    ) -> Lockout | None:
        """The lockout that refuses this login now, if any."""
        for counter, key, limit in self.counters(request, credentials):
            if int(self.cache.get(key, default=0)) >= limit:
                wait = self.cache.ttl(key)
                return Lockout(counter, int(wait if wait is not None else 0))
        return None

    def is_locked(
        self, request: Any, credentials: dict[str, Any] | None = None
    ) -> bool:
        return bool(
            settings.AXES_LOCK_OUT_AT_FAILURE
            and self.lockout(request, credentials) is not None
        )

    def user_login_failed(
        self,
        sender: Any,
        credentials: dict[str, Any],
        request: Any = None,
        **kwargs: Any,
    ) -> None:
        """Count a failure on both counters; lock when one reaches its limit."""
        if request is None:
            return
        if request.axes_locked_out:
            # Refused before the password was checked: not counted.
            request.axes_credentials = credentials
            return
        if self.is_whitelisted(request, credentials):
            return
        timeout = get_cache_timeout(request)
        reached: list[Counter] = []
        highest = 0
        for counter, key, limit in self.counters(request, credentials):
            count = self._increment(key, timeout)
            highest = max(highest, count)
            if count >= limit:
                reached.append(counter)
        request.axes_failures_since_start = highest
        if reached and settings.AXES_LOCK_OUT_AT_FAILURE:
            request.axes_locked_out = True
            request.axes_credentials = credentials
            request.reach_lockout_counter = reached[0]
            user_locked_out.send(
                "axes",
                request=request,
                username=client_username(request, credentials),
                ip_address=request.axes_ip_address,
            )

    def _increment(self, key: str, timeout: int | None) -> int:
        if self.cache.add(key=key, value=1, timeout=timeout):
            return 1
        try:
            count = int(self.cache.incr(key=key, delta=1))
        except ValueError:
            # Expired between the two calls: this failure starts it again.
            self.cache.add(key=key, value=1, timeout=timeout)
            return 1
        self.cache.touch(key=key, timeout=timeout)
        return count


def handler() -> LoginThrottleHandler:
    implementation = AxesProxyHandler.get_implementation()
    assert isinstance(implementation, LoginThrottleHandler), implementation
    return implementation


def current_lockout(request: HttpRequest, username: str | None) -> Lockout | None:
    """The lockout refusing ``username`` from this request's address, if any."""
    if not settings.AXES_ENABLED:
        return None
    AxesProxyHandler.update_request(request)
    credentials = {"username": username} if username else None
    return handler().lockout(request, credentials)


def failure_count(*, username: str | None = None, address: str | None = None) -> int:
    """The failures counted now for an account or an address (the admin's view,
    and the tests')."""
    attempt = AccessAttempt(
        username=account_key_name(username) if username else None,
        ip_address=address,
    )
    counter = Counter.ACCOUNT if username else Counter.ADDRESS
    key = dict(zip(Counter, get_client_cache_keys(attempt), strict=True))[counter]
    return int(handler().cache.get(key, default=0))


def counters_clear(*, username: str | None = None, address: str | None = None) -> int:
    """Delete the counters of an account and/or an address; how many were set."""
    cleared = 0
    if username:
        cleared += failure_count(username=username) > 0
        handler().reset_attempts(username=account_key_name(username))
    if address:
        cleared += failure_count(address=address) > 0
        handler().reset_attempts(ip_address=address)
    return cleared


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: the login page, saying why and for how long (429)."""
    username = str(
        (credentials or {}).get("username") or request.POST.get("username") or ""
    )
    lockout = current_lockout(request, username or None)
    if lockout is None:
        # Locked by this very request: the counter it reached, the full wait.
        counter = getattr(request, "reach_lockout_counter", Counter.ACCOUNT)
        lockout = Lockout(Counter(counter), int(cool_off().total_seconds()))
    form = AuthenticationForm(request, initial={"username": username})
    response = render(
        request,
        "registration/login.html",
        {"form": form, "lockout": lockout.message},
        status=429,
    )
    response["Retry-After"] = str(max(1, lockout.wait_s))
    return response
