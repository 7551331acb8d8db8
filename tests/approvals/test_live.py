"""The live queue (``/ws/approvals/``) and approver email notifications."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import before_task_publish
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core import mail

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from effects.dispatch import outbox_dispatch
from effects.models import Outbox
from tests.support.cast import EMAIL, EMAIL_PREVIEW
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, pending, user_in
from tests.support.smtp_server import LocalSMTP, use_smtp
from tests.support.sockets import next_frame, queue_socket

pytestmark = pytest.mark.django_db(transaction=True)


async def listening(user: Any) -> WebsocketCommunicator:
    comm = queue_socket(user)
    connected, _ = await comm.connect()
    assert connected
    return comm


async def next_approval(comm: WebsocketCommunicator, status: str) -> dict[str, Any]:
    """The next ``approval`` event with this status (skipping any other)."""
    return await next_frame(
        comm,
        lambda m: m["type"] == "approval" and m["approval"]["status"] == status,
        timeout=10,
    )


async def test_a_new_request_and_its_decision_are_pushed_to_the_queue(
    alice, operator, demo, model
):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    comm = await listening(operator)

    task = await database_sync_to_async(ask)(alice, demo.agent, "Mail the report")

    created = await next_approval(comm, "pending")
    [approval] = await database_sync_to_async(pending)(task)
    payload = created["approval"]
    assert payload["id"] == str(approval.pk)
    assert payload["task"] == str(task.pk)
    assert payload["tool"] == "send_email"
    assert payload["preview"] == EMAIL_PREVIEW
    assert payload["arguments"] == EMAIL
    assert f'id="approval-{approval.pk}"' in created["html"]

    await database_sync_to_async(approval_decide)(
        approval=approval, user=operator, decision="reject", reason="not now"
    )

    decided = await next_approval(comm, "rejected")
    assert decided["approval"]["id"] == str(approval.pk)
    assert decided["approval"]["decided_by"] == "operator"
    assert decided["approval"]["reason"] == "not now"
    await comm.disconnect()


def _revoke(user: Any, how: str) -> None:
    if how == "group":
        user.groups.clear()
    else:
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)


@pytest.mark.parametrize("how", ["group", "deactivated"])
async def test_an_approver_whose_permission_is_revoked_gets_no_card_and_is_closed(
    alice, demo, model, how
):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    carol = await database_sync_to_async(user_in)("approvers", "carol")
    comm = await listening(carol)

    await database_sync_to_async(_revoke)(carol, how)
    await database_sync_to_async(ask)(alice, demo.agent, "Mail the report")

    # The first thing after the revocation is the close: no card, no arguments.
    output = await comm.receive_output(timeout=10)
    assert output == {"type": "websocket.close", "code": 4403}


async def test_chat_users_cannot_listen_to_the_queue(alice, bob):
    for user in (alice, bob):
        connected, code = await queue_socket(user).connect()
        assert not connected
        assert code == 4403


async def test_a_foreign_origin_is_refused(operator):
    evil = (b"origin", b"http://evil.example.com")
    connected, _ = await queue_socket(operator, origin=evil).connect()
    assert not connected


@pytest.fixture
def published() -> Iterator[list[tuple[str, Any]]]:
    """The Celery tasks published meanwhile, as (name, args), in order."""
    sent: list[tuple[str, Any]] = []

    def record(sender: str | None = None, body: Any = None, **_: Any) -> None:
        sent.append((str(sender), tuple(body[0]) if body else None))

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)


def test_approvers_are_emailed_about_new_requests_when_enabled(
    alice, operator, demo, model, settings, published
):
    settings.REACH_APPROVAL_EMAILS = True
    model(Script([tool_call("send_email", EMAIL), text("sent")]))

    ask(alice, demo.agent, "Mail the report to ops")

    # The run only queued the notices; the dispatcher, enqueued after commit,
    # sends them (one per approver, each with its own key).
    assert mail.outbox == []
    notices = list(Outbox.objects.order_by("to"))
    keys = [n.idempotency_key for n in notices]
    assert ("effects.dispatch_mail", (keys[0],)) in published
    assert ("effects.dispatch_mail", (keys[1],)) in published
    for notice in notices:
        assert outbox_dispatch(key=notice.idempotency_key) == "sent"
    # Approvers (operator, and admin as superuser) — never the chat users.
    assert sorted(m.to[0] for m in mail.outbox) == [
        "admin@example.com",
        "operator@example.com",
    ]
    for notice in mail.outbox:
        assert len(notice.to) == 1
        assert EMAIL_PREVIEW in notice.subject
        assert "alice" in notice.body
        assert "/approvals/" in notice.body
    assert ApprovalRequest.objects.get().status == "pending"


def test_a_stalled_mail_server_never_stalls_the_run_and_the_dispatcher_times_out(
    alice, operator, demo, model, settings
):
    settings.REACH_APPROVAL_EMAILS = True
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    with LocalSMTP(silent=True) as server:
        use_smtp(settings, server, timeout=0.5)

        task = ask(alice, demo.agent, "Mail the report to ops")

        assert task.status == "waiting_approval"
        # Parking the call (and its commit hooks) never dialled the mail server.
        assert server.connections == 0
        assert Outbox.objects.filter(status="pending").count() == 2

        started = time.monotonic()
        outbox_dispatch()
        # Two notices, each given up after EMAIL_TIMEOUT (not after for ever).
        assert time.monotonic() - started < 10
        assert server.connections == 2
    for notice in Outbox.objects.all():
        assert (notice.status, notice.attempts) == ("pending", 1)
        assert "timed out" in notice.last_error


def test_mail_has_a_timeout_by_default():
    from reach_site import settings as defaults

    assert defaults.EMAIL_TIMEOUT == 10.0


def test_no_approver_email_by_default(alice, demo, model):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    ask(alice, demo.agent, "Mail the report to ops")
    assert mail.outbox == []
    assert ApprovalRequest.objects.get().status == "pending"
