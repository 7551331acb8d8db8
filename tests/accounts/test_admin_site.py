"""The admin behind the product's login: staff pass their second factor first
when REACH_REQUIRE_2FA names admins."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts import services
from tests.support.clients import logged_in
from tests.support.sign_in import next_step_time, post_login, totp_code

pytestmark = pytest.mark.django_db


@pytest.fixture
def required(settings, flush_redis):
    settings.REACH_REQUIRE_2FA = ["admins"]


def test_the_admins_login_is_the_products_login():
    response = Client().get("/admin/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/admin/"
    login = Client().get(response["Location"])
    assert login["Location"] == "/accounts/login/?next=/admin/"


def test_without_the_setting_staff_go_straight_in(admin_user):
    assert logged_in(admin_user).get("/admin/").status_code == 200


def test_staff_without_a_device_are_sent_to_set_one_up(required, admin_user):
    client = logged_in(admin_user)

    response = client.get("/admin/", follow=True)

    assert response.redirect_chain[-1][0] == "/accounts/two-factor/?next=%2Fadmin%2F"
    page = response.content.decode()
    assert "Your roles (admins) need it" in page
    assert 'name="next" value="/admin/"' in page


def test_staff_with_a_device_log_in_with_a_code_and_reach_the_admin(
    required, admin_user, demo
):
    device = services.totp_pending(user=admin_user)
    services.totp_confirm(user=admin_user, code=totp_code(device))
    client = Client()
    password = post_login(client, "admin", demo.password)
    assert password["Location"] == "/accounts/login/code/"

    code = totp_code(device, at=next_step_time(device))
    client.post("/accounts/login/code/", {"code": code})

    assert client.get("/admin/").status_code == 200


def test_a_session_of_staff_that_never_passed_the_code_is_asked_for_one(
    required, admin_user
):
    device = services.totp_pending(user=admin_user)
    services.totp_confirm(user=admin_user, code=totp_code(device))
    client = logged_in(admin_user)

    response = client.get("/admin/", follow=True)

    assert response.redirect_chain[-1][0] == "/accounts/login/code/?next=%2Fadmin%2F"
    code = totp_code(device, at=next_step_time(device))
    done = client.post("/accounts/login/code/", {"code": code, "next": "/admin/"})
    assert done["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200


def test_the_admins_login_sends_nobody_to_another_site(admin_user):
    response = logged_in(admin_user).get("/admin/login/?next=https://evil.example/")
    assert response.status_code == 302 and response["Location"] == "/admin/"
