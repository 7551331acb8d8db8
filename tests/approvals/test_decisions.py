"""Approve, edit, reject, taint, two-person rule and expiry, end to end in-process.

Each run goes through the real runner, the real database and the real ``openai``
SDK against the scripted model; decisions go through the HTTP API.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.tasks import expire
from audit.models import AuditEvent
from effects.models import Outbox, Ticket
from engine.canonical import canonical_hash
from registry.models import Tool
from registry.services import tool_save
from runs.models import Step
from tests.support.cast import EMAIL, EMAIL_PREVIEW, TICKET
from tests.support.clients import logged_in, post_decision
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, ask, pending, user_in
from tests.support.scripted_model import tool_messages

pytestmark = pytest.mark.django_db(transaction=True)


def approve(client: Any, approval: ApprovalRequest) -> None:
    response = post_decision(client, approval, decision="approve")
    assert response.status_code == 200, response.json()


def test_an_email_waits_for_approval_and_runs_once_after_approval(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], _ = email_waiting(alice, demo.agent)

    assert task.status == "waiting_approval"
    assert approval.preview == EMAIL_PREVIEW
    assert approval.risk == "irreversible"
    assert approval.requested_by == alice
    assert Outbox.objects.count() == 0 and len(mail.outbox) == 0

    response = post_decision(api_client_for(operator), approval, decision="approve")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "approved"
    assert response.json()["decided_by"] == "operator"

    task = advance(task)
    assert task.status == "succeeded"
    assert task.final_answer == "The report is sent."
    step = task.steps.get(tool="send_email")
    assert step.status == "succeeded"
    assert step.arguments == EMAIL
    assert step.detail["approved_hash"] == canonical_hash(EMAIL)
    assert Outbox.objects.get().to == "ops@example.com"
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]


def test_an_edited_approval_records_the_diff_and_runs_the_edited_call(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], _ = email_waiting(alice, demo.agent)
    edited = {**EMAIL, "to": "team@example.com"}

    response = post_decision(
        api_client_for(operator), approval, decision="approve", arguments=edited
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["arguments"] == edited
    assert body["proposed_arguments"] == EMAIL
    assert body["diff"] == {"to": {"from": "ops@example.com", "to": "team@example.com"}}
    assert body["preview"] == "Send email to team@example.com — subject: report"
    task = advance(task)
    assert task.status == "succeeded"
    step = task.steps.get(tool="send_email")
    assert step.arguments == edited
    assert step.proposed_arguments == EMAIL
    assert step.detail["decision"]["edited"] is True
    assert [m.to for m in mail.outbox] == [["team@example.com"]]


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"to": "ops@example.com", "subject": "report"}, "body"),
        ({**EMAIL, "cc": "boss@example.com"}, "cc"),
        ({**EMAIL, "subject": 42}, "subject"),
        (["not", "an", "object"], "object"),
        # docs/api.md "Built-in tools": send_email's "to" is one address.
        ({**EMAIL, "to": "ops@example.com, boss@example.com"}, "e-mail address"),
        ({**EMAIL, "to": "not an email address"}, "e-mail address"),
    ],
)
def test_an_edit_failing_the_schema_answers_400_with_the_reason_and_stays_pending(
    alice, operator, demo, email_waiting, api_client_for, arguments, reason
):
    task, [approval], _ = email_waiting(alice, demo.agent)

    response = post_decision(
        api_client_for(operator), approval, decision="approve", arguments=arguments
    )

    assert response.status_code == 400
    assert reason in response.json()["error"]
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert approval.arguments == EMAIL
    assert approval.votes.count() == 0
    assert Step.objects.get(pk=approval.step_id).status == "waiting_approval"


def test_send_email_defined_without_the_format_still_mails_one_address_only(
    alice, operator, demo, email_waiting, api_client_for
):
    # An instance seeded before the schema said "format": "email".
    tool = Tool.objects.get(name="send_email")
    tool.parameters = {
        **tool.parameters,
        "properties": {**tool.parameters["properties"], "to": {"type": "string"}},
    }
    tool_save(tool=tool, user=demo.admin)
    task, [approval], _ = email_waiting(alice, demo.agent)
    two = {**EMAIL, "to": "ops@example.com, boss@example.com"}
    response = post_decision(
        api_client_for(operator), approval, decision="approve", arguments=two
    )
    assert response.status_code == 200, response.json()

    task = advance(task)

    step = task.steps.get(tool="send_email")
    assert step.status == "failed"
    assert "one email address" in step.error
    assert Outbox.objects.count() == 0 and len(mail.outbox) == 0


def test_the_run_refuses_arguments_other_than_the_approved_ones(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], _ = email_waiting(alice, demo.agent)
    approve(api_client_for(operator), approval)
    # Whatever changes the arguments after the decision is not what was approved.
    Step.objects.filter(pk=approval.step_id).update(
        arguments={**EMAIL, "to": "attacker@example.net"}
    )

    task = advance(task)

    step = task.steps.get(tool="send_email")
    assert step.status == "failed"
    assert step.error_class == "approval_mismatch"
    assert Outbox.objects.count() == 0 and len(mail.outbox) == 0


def test_an_unknown_decision_answers_400_naming_every_accepted_value(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], _ = email_waiting(alice, demo.agent)

    response = post_decision(api_client_for(operator), approval, decision="maybe")

    assert response.status_code == 400
    error = response.json()["error"]
    for value in ("approve", "reject", "mark_done", "retry"):
        assert f"'{value}'" in error
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_approve_and_reject_are_recorded_as_decided(
    alice, bob, operator, demo, email_waiting, api_client_for
):
    _, [approved], _ = email_waiting(alice, demo.agent)
    _, [rejected], _ = email_waiting(bob, demo.agent)
    client = api_client_for(operator)

    assert post_decision(client, approved, decision="approve").json()["decision"] == (
        "approve"
    )
    body = post_decision(client, rejected, decision="reject", reason="no").json()
    assert (body["status"], body["decision"]) == ("rejected", "reject")
    listed = {a["id"]: a for a in client.get("/api/approvals/").json()}
    assert listed[str(approved.pk)]["decision"] == "approve"
    assert listed[str(rejected.pk)]["decision"] == "reject"


def test_retry_applies_only_to_recovery_requests(
    alice, operator, demo, email_waiting, api_client_for
):
    _, [approval], _ = email_waiting(alice, demo.agent)

    response = post_decision(api_client_for(operator), approval, decision="retry")

    assert response.status_code == 400
    assert "recovery" in response.json()["error"]
    approval.refresh_from_db()
    assert (approval.status, approval.decision) == ("pending", "")


def test_a_reject_without_a_reason_answers_400_and_stays_pending(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], _ = email_waiting(alice, demo.agent)

    for body in ({"decision": "reject"}, {"decision": "reject", "reason": "   "}):
        response = post_decision(api_client_for(operator), approval, **body)
        assert response.status_code == 400
        assert "reason" in response.json()["error"]
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_reject_sends_the_reason_back_to_the_model_as_the_tools_result(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], script = email_waiting(alice, demo.agent, "I did not send it.")

    response = post_decision(
        api_client_for(operator),
        approval,
        decision="reject",
        reason="Reports go to the team list, not ops",
    )
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    assert response.json()["reason"] == "Reports go to the team list, not ops"

    task = advance(task)
    assert task.status == "succeeded"
    assert task.final_answer == "I did not send it."
    [answer] = tool_messages(script.requests[-1])
    assert "Reports go to the team list, not ops" in answer["content"]
    assert "rejected" in answer["content"]
    assert task.steps.get(tool="send_email").status == "rejected"
    assert Outbox.objects.count() == 0 and len(mail.outbox) == 0


def test_untrusted_notes_force_approval_of_a_normally_automatic_ticket(
    alice, operator, demo, model, api_client_for
):
    model(
        Script(
            [
                tool_call("create_ticket", TICKET),
                text("Ticket created."),
                tool_call("search_notes", {"keyword": "Redis"}),
                tool_call("create_ticket", TICKET),
                text("Ticket created after approval."),
            ]
        )
    )
    # Untainted: the write runs without anyone asked.
    clean = ask(alice, demo.agent, "Make a ticket")
    assert clean.status == "succeeded"
    assert not clean.approvals.exists()
    assert Ticket.objects.count() == 1

    # After reading notes anyone can write, the same write waits for a human.
    tainted = ask(alice, demo.agent, "Make a ticket about the Redis note")
    assert tainted.status == "waiting_approval"
    [approval] = pending(tainted)
    assert approval.tool == "create_ticket"
    assert approval.tainted_by == [f"search_notes#2@{str(tainted.pk)[:8]}"]
    assert any("untrusted" in reason for reason in approval.reasons)
    assert Ticket.objects.count() == 1

    approve(api_client_for(operator), approval)
    tainted = advance(tainted)
    assert tainted.status == "succeeded"
    assert Ticket.objects.count() == 2
    step = tainted.steps.get(tool="create_ticket")
    assert Ticket.objects.get(idempotency_key=step.idempotency_key).title == "Cache"


def two_person_rule(demo: Any) -> Any:
    """Make ``send_email`` need two approvers; return the second one, carol."""
    tool = Tool.objects.get(name="send_email")
    tool.approvals_required = 2
    tool_save(tool=tool, user=demo.admin)
    return user_in("approvers", "carol", email="carol@example.com")


def test_the_two_person_rule_needs_two_distinct_approvers_and_runs_once(
    alice, operator, demo, email_waiting, api_client_for
):
    carol = two_person_rule(demo)
    task, [approval], _ = email_waiting(alice, demo.agent)
    assert approval.approvals_required == 2
    first = api_client_for(operator)

    response = post_decision(first, approval, decision="approve")
    assert response.status_code == 200
    assert response.json()["status"] == "pending"
    assert response.json()["approved_by"] == ["operator"]
    assert advance(task).status == "waiting_approval"
    assert Outbox.objects.count() == 0

    again = post_decision(first, approval, decision="approve")
    assert again.status_code == 409
    other_token = post_decision(api_client_for(operator), approval, decision="approve")
    assert other_token.status_code == 409

    response = post_decision(api_client_for(carol), approval, decision="approve")
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert response.json()["approved_by"] == ["operator", "carol"]

    task = advance(task)
    assert task.status == "succeeded"
    assert Outbox.objects.count() == 1 and len(mail.outbox) == 1


def test_a_two_person_edit_runs_the_edited_arguments_the_second_approver_saw(
    alice, operator, demo, email_waiting, api_client_for
):
    carol = two_person_rule(demo)
    task, [approval], _ = email_waiting(alice, demo.agent)
    edited = {**EMAIL, "subject": "weekly report"}

    first = post_decision(
        api_client_for(operator), approval, decision="approve", arguments=edited
    )
    assert first.status_code == 200 and first.json()["status"] == "pending"
    assert first.json()["arguments"] == edited
    second = post_decision(api_client_for(carol), approval, decision="approve")
    assert second.json()["status"] == "approved"
    assert second.json()["proposed_arguments"] == EMAIL

    task = advance(task)
    assert task.status == "succeeded"
    step = task.steps.get(tool="send_email")
    assert step.arguments == edited
    assert step.proposed_arguments == EMAIL
    assert [m.subject for m in mail.outbox] == ["weekly report"]


def test_a_late_click_after_the_deadline_is_409_even_before_beat_runs(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], _ = email_waiting(alice, demo.agent)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    response = post_decision(api_client_for(operator), approval, decision="approve")

    assert response.status_code == 409
    assert "expired" in response.json()["error"]
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert Step.objects.get(pk=approval.step_id).status == "waiting_approval"


def test_beat_expires_a_stale_request_and_the_model_is_told(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], script = email_waiting(alice, demo.agent, "It is still pending.")
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert expire.apply().get() == 1

    approval.refresh_from_db()
    assert approval.status == "expired"
    assert approval.decided_by is None and approval.reason == ""
    assert Step.objects.get(pk=approval.step_id).status == "expired"
    task = advance(task)
    assert task.status == "succeeded"
    [answer] = tool_messages(script.requests[-1])
    assert "did not run" in answer["content"]
    assert "approved" in answer["content"]
    assert "rejected" not in answer["content"]
    assert Outbox.objects.count() == 0
    late = post_decision(api_client_for(operator), approval, decision="approve")
    assert late.status_code == 409


def test_an_agent_set_to_stop_stops_with_approval_expired(alice, demo, email_waiting):
    demo.agent.on_approval_expired = "stop"
    demo.agent.save()
    task, [approval], script = email_waiting(alice, demo.agent)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    expire.apply()
    task = advance(task)

    assert task.status == "stopped"
    assert task.stop_reason == "approval_expired"
    assert len(script.requests) == 1
    approval.refresh_from_db()
    assert approval.status == "expired"


def test_calls_of_one_turn_are_decided_one_by_one_and_the_task_resumes_after_the_last(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [first_approval, second_approval], _ = email_waiting(
        alice, demo.agent, "Both handled.", also_to="dev@example.com"
    )
    client = api_client_for(operator)

    approve(client, first_approval)
    assert advance(task).status == "waiting_approval"
    assert Outbox.objects.count() == 0

    rejected = post_decision(
        client, second_approval, decision="reject", reason="dev does not need it"
    )
    assert rejected.status_code == 200
    task = advance(task)
    assert task.status == "succeeded"
    assert task.final_answer == "Both handled."
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]
    statuses = dict(task.steps.filter(tool="send_email").values_list("seq", "status"))
    assert sorted(statuses.values()) == ["rejected", "succeeded"]


def test_cancelling_a_waiting_task_cancels_its_requests(
    alice, operator, demo, email_waiting, api_client_for
):
    task, [approval], _ = email_waiting(alice, demo.agent)

    assert (
        api_client_for(alice).post(f"/api/tasks/{task.pk}/cancel/").status_code == 202
    )

    approval.refresh_from_db()
    assert approval.status == "cancelled"
    # Who withdrew it: the person who cancelled the run, in the record and the log.
    assert approval.decided_by == alice
    assert AuditEvent.objects.get(kind="approval.cancelled").actor == "alice"
    history = logged_in(operator).get("/approvals/history/").content.decode()
    assert "the task was cancelled" in history
    assert "<td data-decided-by>alice</td>" in history
    late = post_decision(api_client_for(operator), approval, decision="approve")
    assert late.status_code == 409
    assert Outbox.objects.count() == 0
