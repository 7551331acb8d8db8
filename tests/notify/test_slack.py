"""Slack: a request announced as a Block Kit message, decided from its buttons
through the queue's service, and the message updated in place wherever it was
decided; every forged, stale, replayed or unauthorised click refused and
audited. Against the local fake of Slack's Web API, over real HTTP."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.services import approvals_expire
from audit.models import AuditEvent, AuditKind
from notify.delivery import deliveries_sweep
from notify.models import Delivery, NotifyTarget, SlackMessage
from notify.slack import outcome_text
from runs.models import Step
from tests.support.cast import EMAIL_PREVIEW
from tests.support.clients import bearer_client, post_decision
from tests.support.runs import user_in
from tests.support.slack_fake import (
    CHANNEL,
    OPERATOR,
    FakeSlack,
    block_action,
    reject_submission,
    signed,
)

pytestmark = pytest.mark.django_db

URL = "/integrations/slack/interactions/"


def interact(payload: dict[str, Any], **signing: Any) -> Any:
    body, headers = signed(payload, **signing)
    return Client().post(
        URL, data=body, content_type="application/x-www-form-urlencoded", **headers
    )


def posted(fake: FakeSlack, approval: ApprovalRequest) -> tuple[str, str]:
    """Announce ``approval`` (what the Celery task does after commit) and
    return the channel and ts of its one message."""
    deliveries_sweep()
    message = SlackMessage.objects.get(approval_id=str(approval.pk))
    assert (message.channel, message.ts) in fake.messages
    return message.channel, message.ts


def texts(blocks: list[dict[str, Any]]) -> str:
    """Every text a message's blocks show, joined."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "text" and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(blocks)
    return "\n".join(found)


def buttons(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        element["action_id"]: element
        for block in blocks
        if block["type"] == "actions"
        for element in block["elements"]
    }


def refusals(reason: str) -> list[AuditEvent]:
    return [
        event
        for event in AuditEvent.objects.filter(kind=AuditKind.SLACK_INTERACTION_REFUSED)
        if event.data.get("reason") == reason
    ]


def click(
    approval: ApprovalRequest, where: tuple[str, str], action: str, user: str = OPERATOR
) -> Any:
    channel, ts = where
    return interact(
        block_action(
            user=user, action_id=action, approval=approval, channel=channel, ts=ts
        )
    )


def test_a_new_request_posts_an_interactive_message_to_the_channel(
    fake_slack, slack_channel, email_waiting, settings
):
    _, [approval], _ = email_waiting()
    # Queued in the transaction that opened the request, sent only afterwards.
    delivery = Delivery.objects.get(approval_id=str(approval.pk))
    assert delivery.status == Delivery.Status.PENDING
    assert fake_slack.called("chat.postMessage") == []

    channel, ts = posted(fake_slack, approval)

    assert channel == CHANNEL
    blocks = fake_slack.messages[(channel, ts)]["blocks"]
    shown = texts(blocks)
    assert EMAIL_PREVIEW in shown
    assert "send_email" in shown and "irreversible" in shown
    assert all(reason in shown for reason in approval.reasons)
    actions = buttons(blocks)
    assert actions["reach_approve"]["value"] == str(approval.pk)
    assert actions["reach_reject"]["value"] == str(approval.pk)
    assert actions["reach_open"]["url"] == (
        f"{settings.REACH_PUBLIC_URL}/approvals/#approval-{approval.pk}"
    )
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert delivery.attempt_log.count() == 1


def test_a_direct_message_target_writes_to_each_approver_found_by_email(
    fake_slack, email_waiting, demo
):
    NotifyTarget.objects.create(name="dm", kind=NotifyTarget.Kind.SLACK_DM)
    _, [approval], _ = email_waiting()

    deliveries_sweep()

    looked_up = {args["email"] for args in fake_slack.called("users.lookupByEmail")}
    # The approvers (operator, and admin as a superuser); never the requester.
    assert looked_up == {demo.operator.email, demo.admin.email}
    assert fake_slack.called("conversations.open") == [{"users": OPERATOR}]
    [message] = SlackMessage.objects.filter(approval_id=str(approval.pk))
    assert (message.channel, message.slack_user) == (f"D{OPERATOR}", OPERATOR)
    delivery = Delivery.objects.get(approval_id=str(approval.pk))
    assert delivery.status == Delivery.Status.DELIVERED
    assert demo.admin.email in delivery.last_error  # not in the workspace


def test_approve_in_slack_decides_through_the_queue_service_and_updates_the_message(
    fake_slack, slack_channel, email_waiting, demo
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)

    response = click(approval, where, "reach_approve")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "approved"
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED
    assert approval.decided_by == demo.operator
    assert Step.objects.get(pk=approval.step_id).status == "approved"
    decided = AuditEvent.objects.get(kind=AuditKind.APPROVAL_DECIDED)
    assert decided.actor == "operator"
    assert AuditEvent.objects.filter(
        kind=AuditKind.SLACK_INTERACTION, actor="operator"
    ).exists()
    [told] = fake_slack.called("chat.postEphemeral")
    assert told["user"] == OPERATOR and "Approved by *operator*" in told["text"]

    deliveries_sweep()

    [update] = fake_slack.called("chat.update")
    assert (update["channel"], update["ts"]) == where
    message = fake_slack.messages[where]
    assert "Approved by *operator*" in texts(message["blocks"])
    assert set(buttons(message["blocks"])) == {"reach_open"}


def test_reject_asks_for_a_reason_in_a_modal_and_the_reason_goes_back(
    fake_slack, slack_channel, email_waiting
):
    _, [approval], _ = email_waiting()
    channel, ts = posted(fake_slack, approval)

    opened = click(approval, (channel, ts), "reach_reject")

    assert opened.json() == {"ok": True, "opened": "reject_reason"}
    [modal] = fake_slack.called("views.open")
    assert modal["view"]["callback_id"] == "reach_reject_reason"
    assert modal["view"]["private_metadata"] == f"{approval.pk}|{channel}|{ts}"
    approval.refresh_from_db()
    assert approval.is_pending  # nothing decided by opening the form

    submitted = interact(
        reject_submission(
            user=OPERATOR,
            approval=approval,
            channel=channel,
            ts=ts,
            reason="ops is the wrong list",
        )
    )

    assert submitted.json()["response_action"] == "clear"
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.REJECTED
    assert approval.reason == "ops is the wrong list"
    deliveries_sweep()
    shown = texts(fake_slack.messages[(channel, ts)]["blocks"])
    assert "Rejected by *operator*" in shown and "ops is the wrong list" in shown


def test_a_reject_without_a_reason_is_refused_in_the_modal(
    fake_slack, slack_channel, email_waiting
):
    _, [approval], _ = email_waiting()
    channel, ts = posted(fake_slack, approval)

    answer = interact(
        reject_submission(
            user=OPERATOR, approval=approval, channel=channel, ts=ts, reason="  "
        )
    ).json()

    assert answer["response_action"] == "errors"
    assert "reason is required" in answer["errors"]["reason"]
    approval.refresh_from_db()
    assert approval.is_pending


def test_a_decision_on_the_page_updates_the_slack_message(
    fake_slack, slack_channel, email_waiting, demo
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)

    response = post_decision(
        bearer_client(demo.operator), approval, decision="reject", reason="not now"
    )
    assert response.status_code == 200
    deliveries_sweep()

    shown = texts(fake_slack.messages[where]["blocks"])
    assert "Rejected by *operator*" in shown and "not now" in shown
    assert set(buttons(fake_slack.messages[where]["blocks"])) == {"reach_open"}


def test_an_expired_request_updates_the_message(
    fake_slack, slack_channel, email_waiting
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert approvals_expire() == 1
    deliveries_sweep()

    assert "Expired undecided" in texts(fake_slack.messages[where]["blocks"])


def test_a_click_after_someone_decided_says_who_won(
    fake_slack, slack_channel, email_waiting, demo
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)
    carol = user_in("approvers", "carol", email="carol@example.com")
    fake_slack.add_user("U0CAROL", carol.email)
    post_decision(bearer_client(demo.operator), approval, decision="approve")

    answer = click(approval, where, "reach_reject", user="U0CAROL").json()

    assert answer["ok"] is False
    assert answer["decided_by"] == "operator"
    assert fake_slack.called("views.open") == []
    [told] = fake_slack.called("chat.postEphemeral")
    assert told["user"] == "U0CAROL"
    assert "Too late" in told["text"] and "Approved by *operator*" in told["text"]
    assert refusals("already_decided")


# -- refusals ---------------------------------------------------------------------


def test_a_forged_signature_is_refused_and_nothing_is_decided(
    fake_slack, slack_channel, email_waiting
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)
    payload = block_action(
        user=OPERATOR,
        action_id="reach_approve",
        approval=approval,
        channel=where[0],
        ts=where[1],
    )

    response = interact(payload, secret="not-the-signing-secret")

    assert response.status_code == 401
    assert "signature does not match" in response.json()["error"]
    approval.refresh_from_db()
    assert approval.is_pending
    assert refusals("forged")
    assert fake_slack.called("users.info") == []


def test_an_unsigned_request_is_refused(fake_slack, slack_channel, email_waiting):
    _, [approval], _ = email_waiting()
    response = Client().post(
        URL, data=b"payload=%7B%7D", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 401
    assert refusals("unsigned")


def test_without_a_signing_secret_there_is_no_slack_endpoint(db):
    response = interact({"type": "block_actions", "actions": []})

    assert response.status_code == 404
    assert "No Slack signing secret" in response.json()["error"]


def test_a_stale_timestamp_is_refused_even_when_signed_right(
    fake_slack, slack_channel, email_waiting
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)
    payload = block_action(
        user=OPERATOR,
        action_id="reach_approve",
        approval=approval,
        channel=where[0],
        ts=where[1],
    )

    response = interact(payload, timestamp=int(time.time()) - 6 * 60)

    assert response.status_code == 401
    assert "five minutes" in response.json()["error"]
    approval.refresh_from_db()
    assert approval.is_pending
    assert refusals("stale")


def test_a_replayed_request_is_refused(fake_slack, slack_channel, email_waiting):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)
    body, headers = signed(
        block_action(
            user=OPERATOR,
            action_id="reach_reject",
            approval=approval,
            channel=where[0],
            ts=where[1],
        )
    )

    def send() -> Any:
        return Client().post(
            URL,
            data=body,
            content_type="application/x-www-form-urlencoded",
            **headers,
        )

    assert send().status_code == 200
    replayed = send()

    assert replayed.status_code == 409
    assert "already received" in replayed.json()["error"]
    assert len(fake_slack.called("views.open")) == 1
    assert refusals("replayed")


def test_a_slack_user_with_no_matching_account_decides_nothing(
    fake_slack, slack_channel, email_waiting
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)
    fake_slack.add_user("U0STRANGER", "stranger@elsewhere.example")

    answer = click(approval, where, "reach_approve", user="U0STRANGER").json()

    assert answer["ok"] is False and "No Agent Reach account" in answer["error"]
    approval.refresh_from_db()
    assert approval.is_pending
    assert refusals("unknown_user")
    [told] = fake_slack.called("chat.postEphemeral")
    assert told["user"] == "U0STRANGER"


def test_an_unconfirmed_slack_email_is_not_trusted(
    fake_slack, slack_channel, email_waiting, demo
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)
    # Someone set the operator's address on a Slack profile without confirming it.
    fake_slack.add_user("U0IMPOSTOR", demo.operator.email, confirmed=False)

    answer = click(approval, where, "reach_approve", user="U0IMPOSTOR").json()

    assert answer["ok"] is False
    approval.refresh_from_db()
    assert approval.is_pending
    assert refusals("unknown_user")


def test_a_slack_user_who_is_not_an_approver_decides_nothing(
    fake_slack, slack_channel, email_waiting
):
    _, [approval], _ = email_waiting()
    where = posted(fake_slack, approval)

    answer = click(approval, where, "reach_approve", user="U0BOB").json()

    assert answer["ok"] is False and "not an approver" in answer["error"]
    approval.refresh_from_db()
    assert approval.is_pending
    [refusal] = refusals("not_an_approver")
    assert refusal.actor == "bob"


def test_the_requester_cannot_approve_their_own_request_from_slack(
    fake_slack, slack_channel, email_waiting, demo
):
    # The operator's own run: the operator is an approver, but not of this one.
    _, [approval], _ = email_waiting(user=demo.operator)
    where = posted(fake_slack, approval)

    answer = click(approval, where, "reach_approve").json()

    assert answer["ok"] is False and "your own task" in answer["error"]
    approval.refresh_from_db()
    assert approval.is_pending


# -- delivery faults --------------------------------------------------------------


def test_a_failed_post_is_retried_with_backoff_until_it_goes_through(
    fake_slack, slack_channel, email_waiting, settings
):
    _, [approval], _ = email_waiting()
    fake_slack.failing["chat.postMessage"] = "ratelimited"

    deliveries_sweep()

    delivery = Delivery.objects.get(approval_id=str(approval.pk))
    assert delivery.status == Delivery.Status.PENDING
    assert delivery.attempts == 1
    assert "ratelimited" in delivery.last_error
    wait = (delivery.next_attempt_at - delivery.attempt_log.get().at).total_seconds()
    assert wait == pytest.approx(settings.REACH_NOTIFY_BACKOFF_S, abs=1)
    assert deliveries_sweep() == 0  # not due yet

    del fake_slack.failing["chat.postMessage"]
    deliveries_sweep(now=delivery.next_attempt_at + timedelta(seconds=1))

    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert [a.error != "" for a in delivery.attempt_log.all()] == [True, False]
    assert SlackMessage.objects.filter(approval_id=str(approval.pk)).count() == 1


def test_without_a_bot_token_a_delivery_waits_and_says_why(
    slack_channel, email_waiting, settings
):
    _, [approval], _ = email_waiting()

    deliveries_sweep()

    delivery = Delivery.objects.get(approval_id=str(approval.pk))
    assert delivery.status == Delivery.Status.PENDING
    assert "No Slack bot token" in delivery.last_error


def test_an_update_waits_for_the_message_it_updates(
    fake_slack, slack_channel, email_waiting, demo
):
    _, [approval], _ = email_waiting()
    fake_slack.failing["chat.postMessage"] = "service_unavailable"
    deliveries_sweep()
    post_decision(bearer_client(demo.operator), approval, decision="approve")

    deliveries_sweep(now=timezone.now() + timedelta(hours=2))  # both due again

    # Posted now, showing the outcome; the update finds it on its next try.
    del fake_slack.failing["chat.postMessage"]
    deliveries_sweep(now=timezone.now() + timedelta(hours=4))
    deliveries_sweep(now=timezone.now() + timedelta(hours=6))
    [message] = fake_slack.messages.values()
    assert "Approved by *operator*" in texts(message["blocks"])
    assert not Delivery.objects.exclude(status=Delivery.Status.DELIVERED).exists()


def test_the_outcome_of_a_recovery_request_says_which_approval_it_was(demo):
    done = ApprovalRequest(
        status=ApprovalRequest.Status.APPROVED,
        decision="mark_done",
        decided_by=demo.operator,
        decided_at=timezone.now(),
    )

    said = outcome_text(done)

    assert said.startswith(":white_check_mark: Approved (marked done) by *operator*")
