"""Signing in as a person does: the login form, the second factor's codes, and
the throttle's counters read straight from Redis (as another process would)."""

from __future__ import annotations

import hashlib
import time
from base64 import b32decode
from typing import Any

import redis
from django.conf import settings
from django.test import Client
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import throttle


def post_login(client: Client, username: str, password: str, **extra: Any) -> Any:
    """POST the login form (``extra``: request META, such as ``REMOTE_ADDR``)."""
    return client.post(
        "/accounts/login/", {"username": username, "password": password}, **extra
    )


def totp_code(device: TOTPDevice, *, at: float | None = None) -> str:
    """The code the user's authenticator app shows at ``at`` (default now)."""
    device.refresh_from_db()
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() if at is None else at
    return f"{totp.token():0{device.digits}d}"


def code_from_secret(secret: str, *, at: float | None = None) -> str:
    """The code for the base32 key the set-up page shows (spaces allowed)."""
    key = b32decode(secret.replace(" ", "").upper())
    totp = TOTP(key)
    totp.time = time.time() if at is None else at
    return f"{totp.token():06d}"


def next_step_time(device: TOTPDevice) -> float:
    """A moment in the time step after the last accepted one (a code not yet
    used: the tolerance takes one step ahead)."""
    device.refresh_from_db()
    return float((device.last_t + 1) * device.step + device.t0 + 1)


def redis_count(*, username: str | None = None, address: str | None = None) -> int:
    """A throttle counter read through a Redis client of its own (not the
    product's cache): what every other web process reads."""
    value = throttle.account_key_name(username) if username else str(address)
    key = f"reach:1:axes-{hashlib.sha256(value.encode()).hexdigest()}"
    raw = redis.Redis.from_url(settings.REDIS_URL).get(key)
    return int(raw) if raw is not None else 0
