"""Two-factor authentication: set up from a page (QR code and key, confirmed by a
code), recovery codes shown once, the login's second step, codes refused when
wrong or used, upkeep after the password and a code again."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import policy, services
from audit.models import AuditEvent, AuditKind
from tests.support.clients import logged_in
from tests.support.sign_in import (
    code_from_secret,
    next_step_time,
    post_login,
    redis_count,
    totp_code,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counters(flush_redis, settings):
    # The throttle's waits are tested on their own; elsewhere a wrong code must
    # not hold up the right one that follows.
    settings.OTP_TOTP_THROTTLE_FACTOR = 0
    settings.OTP_STATIC_THROTTLE_FACTOR = 0


def enrol(user):
    """Set up ``user``'s authenticator the way the page does; their recovery codes."""
    device = services.totp_pending(user=user)
    return device, services.totp_confirm(user=user, code=totp_code(device))


def password_step(user, password: str) -> Client:
    client = Client()
    response = post_login(client, user.get_username(), password)
    assert (
        response.status_code == 302 and response["Location"] == "/accounts/login/code/"
    )
    return client


def test_the_set_up_page_shows_a_qr_code_and_the_key_and_a_code_turns_it_on(alice):
    client = logged_in(alice)

    page = client.get("/accounts/two-factor/").content.decode()
    assert 'data-status="off"' in page
    assert re.search(r'<figure class="qr" data-qr><svg [^>]*class="segno"', page)
    secret = re.search(r"<code data-secret>([A-Z2-7 ]+)</code>", page).group(1)
    # A reload shows the same key until it is confirmed.
    assert secret in client.get("/accounts/two-factor/").content.decode()
    assert not TOTPDevice.objects.filter(user=alice, confirmed=True).exists()

    wrong = client.post(
        "/accounts/two-factor/", {"action": "confirm", "code": "000000"}
    )
    assert wrong.status_code == 400
    assert "That code is not right." in wrong.content.decode()

    shown = client.post(
        "/accounts/two-factor/",
        {"action": "confirm", "code": code_from_secret(secret)},
    )
    assert shown.status_code == 200
    assert shown["Cache-Control"] == "no-store"
    codes = re.findall(r"<li><code>([a-z2-7]+)</code></li>", shown.content.decode())
    assert len(codes) == services.RECOVERY_CODES
    assert sorted(codes) == sorted(
        StaticToken.objects.filter(device__user=alice).values_list("token", flat=True)
    )
    assert TOTPDevice.objects.get(user=alice).confirmed
    # Shown once: the page afterwards says how many are left, never which.
    after = client.get("/accounts/two-factor/").content.decode()
    assert 'data-status="on"' in after
    assert "10</span> recovery codes left" in after
    assert not any(code in after for code in codes)
    kinds = set(AuditEvent.objects.values_list("kind", flat=True))
    assert {AuditKind.AUTH_2FA_ENABLED, AuditKind.AUTH_RECOVERY_CODES_ISSUED} <= kinds


def test_a_user_with_an_authenticator_is_asked_for_a_code_after_the_password(demo):
    device, _ = enrol(demo.alice)
    client = password_step(demo.alice, demo.password)

    # The password alone logs nobody in.
    assert client.get("/")["Location"].startswith("/accounts/login/")
    page = client.get("/accounts/login/code/").content.decode()
    assert "Enter your code" in page

    done = client.post(
        "/accounts/login/code/", {"code": totp_code(device, at=next_step_time(device))}
    )

    assert done.status_code == 302 and done["Location"] == "/"
    chat = client.get("/")
    assert chat.status_code == 200
    assert chat.wsgi_request.user.is_verified()


def test_a_wrong_code_is_refused_counted_and_audited(demo):
    enrol(demo.alice)
    client = password_step(demo.alice, demo.password)

    wrong = client.post("/accounts/login/code/", {"code": "123456"})

    assert wrong.status_code == 400
    assert "That code is not right." in wrong.content.decode()
    assert client.get("/")["Location"].startswith("/accounts/login/")
    # Counted on the account like a wrong password, in the shared counters.
    assert redis_count(username="alice") == 1
    event = AuditEvent.objects.filter(kind=AuditKind.AUTH_LOGIN_FAILED).last()
    assert event.object_id == "alice" and event.data == {"stage": "second_factor"}


def test_a_code_once_used_is_refused(demo):
    device, _ = enrol(demo.alice)
    code = totp_code(device, at=next_step_time(device))
    first = password_step(demo.alice, demo.password)
    assert first.post("/accounts/login/code/", {"code": code}).status_code == 302

    second = password_step(demo.alice, demo.password)
    reused = second.post("/accounts/login/code/", {"code": code})

    assert reused.status_code == 400
    assert "That code was used already." in reused.content.decode()
    assert second.get("/")["Location"].startswith("/accounts/login/")


def test_wrong_codes_make_the_next_try_wait(demo, settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = 60
    device, _ = enrol(demo.alice)
    client = password_step(demo.alice, demo.password)
    client.post("/accounts/login/code/", {"code": "123456"})

    right = client.post(
        "/accounts/login/code/", {"code": totp_code(device, at=next_step_time(device))}
    )

    assert right.status_code == 400
    assert "Too many wrong codes: wait 1 minute before trying the next one." in (
        right.content.decode()
    )


def test_a_recovery_code_logs_in_once(demo):
    _, codes = enrol(demo.alice)
    client = password_step(demo.alice, demo.password)

    used = client.post("/accounts/login/code/", {"code": codes[0].upper()}, follow=True)

    assert used.status_code == 200 and used.request["PATH_INFO"] == "/"
    assert "You logged in with a recovery code; 9 left." in used.content.decode()
    assert StaticToken.objects.filter(device__user=demo.alice).count() == 9
    assert AuditEvent.objects.filter(kind=AuditKind.AUTH_RECOVERY_CODE_USED).exists()

    again = password_step(demo.alice, demo.password)
    refused = again.post("/accounts/login/code/", {"code": codes[0]})
    assert refused.status_code == 400
    assert "That recovery code is not one of yours, or it was used already." in (
        refused.content.decode()
    )


def test_the_code_waits_only_minutes_after_the_password(demo):
    device, _ = enrol(demo.alice)
    client = password_step(demo.alice, demo.password)
    session = client.session
    session["reach_2fa_pending"]["at"] -= 301
    session.save()

    late = client.post(
        "/accounts/login/code/", {"code": totp_code(device, at=next_step_time(device))}
    )

    assert late.status_code == 302 and late["Location"] == "/accounts/login/"
    assert client.get("/")["Location"].startswith("/accounts/login/")


def test_new_recovery_codes_and_turning_it_off_need_the_password_and_a_code(demo):
    device, old_codes = enrol(demo.alice)
    client = logged_in(demo.alice)

    no_password = client.post(
        "/accounts/two-factor/",
        {"action": "regenerate", "password": "wrong", "code": old_codes[0]},
    )
    assert no_password.status_code == 400
    assert "That password is not right." in no_password.content.decode()
    assert StaticToken.objects.filter(token=old_codes[0]).exists()

    fresh = client.post(
        "/accounts/two-factor/",
        {"action": "regenerate", "password": demo.password, "code": old_codes[0]},
    )
    new_codes = re.findall(r"<li><code>([a-z2-7]+)</code></li>", fresh.content.decode())
    assert len(new_codes) == services.RECOVERY_CODES
    assert not StaticToken.objects.filter(token__in=old_codes).exists()

    wrong_code = client.post(
        "/accounts/two-factor/",
        {"action": "disable", "password": demo.password, "code": "111111"},
    )
    assert wrong_code.status_code == 400
    assert TOTPDevice.objects.filter(user=demo.alice).exists()

    off = client.post(
        "/accounts/two-factor/",
        {"action": "disable", "password": demo.password, "code": new_codes[0]},
        follow=True,
    )
    assert "Two-factor authentication is off." in off.content.decode()
    # The page offers a new set-up at once (a new, unconfirmed key).
    assert 'data-status="off"' in off.content.decode()
    assert not TOTPDevice.objects.filter(user=demo.alice, confirmed=True).exists()
    assert not TOTPDevice.objects.filter(pk=device.pk).exists()
    assert not StaticToken.objects.filter(device__user=demo.alice).exists()
    assert AuditEvent.objects.filter(kind=AuditKind.AUTH_2FA_DISABLED).count() == 1
    # Without a device, the password alone logs in again.
    assert post_login(Client(), "alice", demo.password)["Location"] == "/"


def test_wrong_codes_lock_the_account_like_wrong_passwords(demo, settings):
    settings.REACH_LOGIN_FAILURES_PER_ACCOUNT = 2
    device, _ = enrol(demo.alice)
    client = password_step(demo.alice, demo.password)
    assert client.post("/accounts/login/code/", {"code": "123456"}).status_code == 400

    locked = client.post("/accounts/login/code/", {"code": "654321"})

    assert locked.status_code == 429
    assert "Too many failed logins for this account." in locked.content.decode()
    # The right code is refused too while the lock lasts.
    right = client.post(
        "/accounts/login/code/", {"code": totp_code(device, at=next_step_time(device))}
    )
    assert right.status_code == 429
    assert client.get("/")["Location"].startswith("/accounts/login/")


def test_the_policy_links_to_the_pages_the_site_serves():
    assert reverse("two-factor") == policy.ENROL_PATH
    assert reverse("login-code") == policy.VERIFY_PATH
