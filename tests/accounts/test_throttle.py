"""Login throttling: failed logins counted per account and per address in the
bundled Redis, a lockout that says why and for how long, audited, unlockable."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from audit.models import AuditEvent, AuditKind
from tests.support.clients import logged_in
from tests.support.sign_in import post_login, redis_count

pytestmark = pytest.mark.django_db

ADDRESS = "10.1.2.3"
OTHER_ADDRESS = "10.1.2.4"


@pytest.fixture(autouse=True)
def limits(settings, flush_redis):
    settings.REACH_LOGIN_FAILURES_PER_ACCOUNT = 3
    settings.REACH_LOGIN_FAILURES_PER_ADDRESS = 5
    settings.REACH_LOGIN_LOCKOUT_MINUTES = 15


def test_an_account_locks_at_its_limit_and_the_page_says_why_and_how_long(demo):
    client = Client()
    for _ in range(2):
        response = post_login(client, "alice", "wrong", REMOTE_ADDR=ADDRESS)
        assert response.status_code == 200
        assert b"didn't match" in response.content
    third = post_login(client, "alice", "wrong", REMOTE_ADDR=ADDRESS)

    assert third.status_code == 429
    page = third.content.decode()
    assert "Too many failed logins for this account." in page
    assert "Wait 15 minutes and try again, or ask an admin to unlock it." in page
    assert 14 * 60 <= int(third["Retry-After"]) <= 15 * 60
    # The right password is refused too, from anywhere, until the wait is over.
    again = post_login(Client(), "alice", demo.password, REMOTE_ADDR=OTHER_ADDRESS)
    assert again.status_code == 429
    assert "_auth_user_id" not in again.wsgi_request.session


def test_the_counts_live_in_redis_where_every_web_process_reads_them(demo):
    for _ in range(2):
        post_login(Client(), "alice", "wrong", REMOTE_ADDR=ADDRESS)

    # A client of its own, not the product's cache: another process sees this.
    assert redis_count(username="alice") == 2
    assert redis_count(address=ADDRESS) == 2
    assert redis_count(username="bob") == 0


def test_attempts_during_a_lockout_are_not_counted_and_do_not_extend_it(demo):
    for _ in range(3):
        post_login(Client(), "alice", "wrong", REMOTE_ADDR=ADDRESS)
    assert redis_count(username="alice") == 3

    refused = post_login(Client(), "alice", "wrong", REMOTE_ADDR=OTHER_ADDRESS)

    assert refused.status_code == 429
    assert redis_count(username="alice") == 3
    assert redis_count(address=OTHER_ADDRESS) == 0


def test_an_address_locks_at_its_limit_for_every_account_it_tries(demo):
    # Five names, one failure each: no account reaches its limit, the address does.
    for name in ("carol", "dave", "erin", "frank"):
        assert post_login(Client(), name, "x", REMOTE_ADDR=ADDRESS).status_code == 200
    fifth = post_login(Client(), "grace", "x", REMOTE_ADDR=ADDRESS)
    assert fifth.status_code == 429
    assert "Too many failed logins from your network address." in fifth.content.decode()

    # alice's right password from that address is refused; from another it works.
    refused = post_login(Client(), "alice", demo.password, REMOTE_ADDR=ADDRESS)
    assert refused.status_code == 429
    assert "from your network address" in refused.content.decode()
    elsewhere = post_login(Client(), "alice", demo.password, REMOTE_ADDR=OTHER_ADDRESS)
    assert elsewhere.status_code == 302 and elsewhere["Location"] == "/"


def test_an_unknown_user_name_is_counted_like_a_real_one(demo):
    for _ in range(3):
        last = post_login(Client(), "nobody-here", "x", REMOTE_ADDR=ADDRESS)
    assert last.status_code == 429
    assert "for this account" in last.content.decode()


def test_failures_and_the_lockout_are_audited(demo):
    for _ in range(4):
        post_login(Client(), "alice", "wrong", REMOTE_ADDR=ADDRESS)

    failed = AuditEvent.objects.filter(kind=AuditKind.AUTH_LOGIN_FAILED)
    assert failed.filter(object_id="alice").count() == 4
    locked = list(AuditEvent.objects.filter(kind=AuditKind.AUTH_LOCKED_OUT))
    # Once, when the lockout began (the fourth attempt was refused unchecked).
    assert len(locked) == 1
    assert locked[0].object_type == "user" and locked[0].object_id == "alice"
    assert locked[0].data == {
        "counter": "account",
        "username": "alice",
        "address": ADDRESS,
        "minutes": 15,
    }


def test_an_admin_unlocks_accounts_from_the_user_list_and_it_is_audited(
    demo, admin_user
):
    for _ in range(3):
        post_login(Client(), "alice", "wrong", REMOTE_ADDR=ADDRESS)
    assert post_login(Client(), "alice", demo.password).status_code == 429

    response = logged_in(admin_user).post(
        "/admin/auth/user/",
        {"action": "unlock_login", "_selected_action": [demo.alice.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert "Unlocked 1 account(s); 1 had failed logins counted." in (
        response.content.decode()
    )
    assert redis_count(username="alice") == 0
    assert post_login(Client(), "alice", demo.password).status_code == 302
    event = AuditEvent.objects.get(kind=AuditKind.AUTH_UNLOCKED)
    assert event.actor == "admin" and event.object_id == "alice"
    assert event.data == {"username": "alice", "address": "", "cleared": 1}


def test_unlock_login_clears_an_address_and_it_is_audited(demo, capsys):
    for name in ("carol", "dave", "erin", "frank", "grace"):
        post_login(Client(), name, "x", REMOTE_ADDR=ADDRESS)
    assert redis_count(address=ADDRESS) == 5

    call_command("unlock_login", "--address", ADDRESS)

    assert (
        f"Unlocked address {ADDRESS} (1 count(s) cleared)." in capsys.readouterr().out
    )
    assert redis_count(address=ADDRESS) == 0
    login = post_login(Client(), "alice", demo.password, REMOTE_ADDR=ADDRESS)
    assert login.status_code == 302
    event = AuditEvent.objects.get(kind=AuditKind.AUTH_UNLOCKED)
    assert event.actor == "manage.py" and event.object_type == "address"


def test_unlock_login_without_an_account_or_address_says_what_it_needs(demo):
    with pytest.raises(CommandError, match="Give --user NAME, --address IP, or both."):
        call_command("unlock_login")
