"""Log out everywhere: every session of the user ends, their open sockets close
within moments, audited; from their own page or by an admin."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from django.contrib.sessions.models import Session
from django.test import Client

from accounts.services import sessions_end_all
from audit.models import AuditEvent, AuditKind
from tests.support.clients import logged_in
from tests.support.sign_in import post_login
from tests.support.sockets import queue_socket

pytestmark = pytest.mark.django_db(transaction=True)


def logged_out(client: Client) -> bool:
    response = client.get("/")
    return response.status_code == 302 and response["Location"].startswith(
        "/accounts/login/"
    )


def test_log_out_everywhere_ends_every_session_of_the_user_and_no_other(
    demo, flush_redis
):
    laptop, phone = Client(), Client()
    for client in (laptop, phone):
        assert post_login(client, "alice", demo.password).status_code == 302
    bobs = logged_in(demo.bob)

    done = phone.post("/accounts/sessions/", follow=True)

    assert "Logged out everywhere: 2 sessions ended." in done.content.decode()
    assert logged_out(laptop) and logged_out(phone)
    assert not logged_out(bobs)
    event = AuditEvent.objects.get(kind=AuditKind.AUTH_SESSIONS_ENDED)
    assert event.actor == "alice" and event.object_id == "alice"
    assert event.data == {"sessions": 2, "by_admin": False}


def test_an_admin_logs_a_user_out_everywhere_from_the_user_list(demo, admin_user):
    alices = logged_in(demo.alice)

    response = logged_in(admin_user).post(
        "/admin/auth/user/",
        {"action": "log_out_everywhere", "_selected_action": [demo.alice.pk]},
        follow=True,
    )

    assert "Ended 1 session(s) of 1 user(s)." in response.content.decode()
    assert logged_out(alices)
    assert not Session.objects.filter(
        session_key=alices.cookies["sessionid"].value
    ).exists()
    event = AuditEvent.objects.get(kind=AuditKind.AUTH_SESSIONS_ENDED)
    assert event.actor == "admin" and event.data["by_admin"] is True


async def test_log_out_everywhere_closes_the_users_open_websocket(operator):
    comm = queue_socket(operator)
    connected, _ = await comm.connect()
    assert connected

    await database_sync_to_async(sessions_end_all)(user=operator, by=operator)

    # Through the channel layer (Redis), as another web process's socket would.
    output = await comm.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": 4401}
