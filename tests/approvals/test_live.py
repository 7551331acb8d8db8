"""The live queue (``/ws/approvals/``) and approver email notifications."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core import mail

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tests.support.cast import EMAIL
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, pending
from tests.support.sockets import queue_socket

pytestmark = pytest.mark.django_db(transaction=True)


async def listening(user: Any) -> WebsocketCommunicator:
    comm = queue_socket(user)
    connected, _ = await comm.connect()
    assert connected
    return comm


async def next_approval(comm: WebsocketCommunicator, status: str) -> dict[str, Any]:
    """The next ``approval`` event with this status (skipping any other)."""
    while True:
        message = await comm.receive_json_from(timeout=10)
        if message["type"] == "approval" and message["approval"]["status"] == status:
            return message


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
    assert payload["preview"] == "Send email to ops@example.com — subject: report"
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


async def test_chat_users_cannot_listen_to_the_queue(alice, bob):
    for user in (alice, bob):
        connected, code = await queue_socket(user).connect()
        assert not connected
        assert code == 4403


async def test_a_foreign_origin_is_refused(operator):
    evil = (b"origin", b"http://evil.example.com")
    connected, _ = await queue_socket(operator, origin=evil).connect()
    assert not connected


def test_approvers_are_emailed_about_new_requests_when_enabled(
    alice, operator, demo, model, settings
):
    settings.REACH_APPROVAL_EMAILS = True
    model(Script([tool_call("send_email", EMAIL), text("sent")]))

    ask(alice, demo.agent, "Mail the report to ops")

    [notice] = mail.outbox
    # Approvers (operator, and admin as superuser) — never the chat users.
    assert sorted(notice.to) == ["admin@example.com", "operator@example.com"]
    assert "Send email to ops@example.com — subject: report" in notice.subject
    assert "alice" in notice.body
    assert "/approvals/" in notice.body
    assert ApprovalRequest.objects.get().status == "pending"


def test_no_approver_email_by_default(alice, demo, model):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    ask(alice, demo.agent, "Mail the report to ops")
    assert mail.outbox == []
    assert ApprovalRequest.objects.get().status == "pending"
