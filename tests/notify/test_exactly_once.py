"""One decision across channels: approved in Slack and rejected on the page at
the same moment, the request is decided once, and the side that lost is told
who won. Real threads with their own connections, released together, on a
file SQLite database and on PostgreSQL (``-m dbsensitive`` with DATABASE_URL).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from approvals.models import ApprovalRequest
from audit.models import AuditEvent, AuditKind
from notify.delivery import deliveries_sweep
from notify.models import SlackMessage
from tests.support.clients import bearer_client, decision_url
from tests.support.racing import at_once
from tests.support.runs import user_in
from tests.support.slack_fake import OPERATOR, block_action, signed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]

ROUNDS = 3


def race(approval: ApprovalRequest, message: SlackMessage, page: Any) -> list[Any]:
    """Approve in Slack (a signed click on the message) and reject on the page
    (the queue's API call), released together."""
    body, headers = signed(
        block_action(
            user=OPERATOR,
            action_id="reach_approve",
            approval=approval,
            channel=message.channel,
            ts=message.ts,
        )
    )

    def in_slack() -> Any:
        return Client().post(
            "/integrations/slack/interactions/",
            data=body,
            content_type="application/x-www-form-urlencoded",
            **headers,
        )

    def on_the_page() -> Any:
        return page.post(
            decision_url(approval),
            {"decision": "reject", "reason": "not this week"},
            format="json",
        )

    return at_once([in_slack, on_the_page])


def test_approve_in_slack_and_reject_on_the_page_at_once_make_one_decision(
    fake_slack, slack_channel, email_waiting
):
    page_user = user_in("approvers", "pagey", email="pagey@example.com")
    page = bearer_client(page_user, name="race")
    winners = set()
    for _ in range(ROUNDS):
        _, [approval], _ = email_waiting()
        deliveries_sweep()
        message = SlackMessage.objects.get(approval_id=str(approval.pk))
        slack_answer, page_answer = race(approval, message, page)

        assert not isinstance(slack_answer, BaseException), slack_answer
        assert not isinstance(page_answer, BaseException), page_answer
        approval.refresh_from_db()
        decided = AuditEvent.objects.filter(
            kind=AuditKind.APPROVAL_DECIDED, object_id=str(approval.pk)
        )
        assert decided.count() == 1
        slack_said = slack_answer.json()
        if approval.status == ApprovalRequest.Status.APPROVED:
            assert approval.decided_by.username == "operator"
            assert slack_said["ok"] is True
            assert page_answer.status_code == 409
            assert "already approved" in page_answer.json()["error"]
        else:
            assert approval.status == ApprovalRequest.Status.REJECTED
            assert approval.decided_by.username == "pagey"
            assert page_answer.status_code == 200
            assert slack_said["ok"] is False
            assert slack_said["decided_by"] == "pagey"
            told = [
                t["text"]
                for t in fake_slack.called("chat.postEphemeral")
                if "Too late" in t["text"]
            ]
            assert any("Rejected by *pagey*" in t for t in told)
        assert decided.get().actor == approval.decided_by.username
        winners.add(approval.decided_by.username)

        deliveries_sweep()

        shown = str(fake_slack.messages[(message.channel, message.ts)]["blocks"])
        assert f"by *{approval.decided_by.username}*" in shown
        assert "reach_approve" not in shown
    assert winners <= {"operator", "pagey"}
