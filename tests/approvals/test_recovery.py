"""A write whose outcome is unknown after a crash goes to a human, never blindly again.

The crash is simulated as a dead worker leaves it: the approved step ``running``
with ``started_at`` set and no result, the task ``running`` under a lease that
expired. The next ``advance`` takes the run over.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.services import RECOVERY_REASON
from effects.models import Outbox, ToolExecution
from registry.services import toolbox_for_snapshot
from runs.models import Step, Task
from tests.support.cast import EMAIL
from tests.support.clients import decision_url, logged_in, post_decision
from tests.support.runs import advance, pending
from tests.support.scripted_model import tool_messages

pytestmark = pytest.mark.django_db(transaction=True)


def decide(client: Any, approval: ApprovalRequest, **body: Any) -> Any:
    response = post_decision(client, approval, **body)
    assert response.status_code == 200, response.json()
    return response.json()


def crash_while_sending(task: Task, *, effect_happened: bool) -> Step:
    """Leave the approved email as a worker killed in the middle of it would."""
    step = task.steps.get(tool="send_email")
    if effect_happened:
        # The handler committed its ledger row and sent the mail, then the
        # worker died before the step's result was written.
        from engine.spec import CallContext

        toolbox = toolbox_for_snapshot(task.agent_snapshot)
        spec = toolbox.specs["send_email"]
        toolbox.handlers["send_email"](
            dict(step.arguments),
            CallContext(
                task_id=str(task.pk),
                seq=step.seq,
                idempotency_key=step.idempotency_key or "",
                tool=spec,
                deadline=0,
            ),
        )
    Step.objects.filter(pk=step.pk).update(
        status="running", started_at=timezone.now(), result=None
    )
    Task.objects.filter(pk=task.pk).update(
        status="running",
        lease_owner="dead-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    return step


@pytest.fixture
def crashed(alice, operator, demo, email_waiting, api_client_for):
    """``crashed(effect_happened)`` -> (task, the recovery request, its model)."""

    def make(effect_happened: bool) -> tuple[Task, ApprovalRequest, Any]:
        task, [approval], script = email_waiting(
            alice, demo.agent, "Done with the email."
        )
        decide(api_client_for(operator), approval, decision="approve")
        crash_while_sending(task, effect_happened=effect_happened)

        task = advance(task)

        assert task.status == "waiting_approval"
        [recovery] = pending(task)
        return task, recovery, script

    return make


def test_an_unknown_outcome_becomes_a_did_it_happen_request_in_the_queue(
    crashed, operator
):
    task, recovery, script = crashed(effect_happened=False)

    assert recovery.kind == "recovery"
    assert recovery.tool == "send_email"
    assert recovery.arguments == EMAIL
    assert recovery.reasons == [RECOVERY_REASON]
    step = Step.objects.get(pk=recovery.step_id)
    assert step.status == "waiting_approval"
    assert step.error_class == "outcome_unknown"
    # The earlier, approved request stays in the history as it was decided.
    assert task.approvals.filter(kind="action", status="approved").count() == 1
    assert len(script.requests) == 1
    assert Outbox.objects.count() == 0

    page = logged_in(operator).get("/approvals/").content.decode()
    card = page[page.index(f'id="approval-{recovery.pk}"') :]
    card = card[: card.index("</section>")]
    assert "outcome unknown" in card
    for button in (
        'data-action="approve">Retry',
        'data-action="mark_done"',
        'data-action="reject"',
    ):
        assert button in card
    assert "Edit &amp; approve" not in card


def test_retry_after_an_effect_that_happened_does_not_repeat_it(
    crashed, operator, api_client_for
):
    task, recovery, _ = crashed(effect_happened=True)
    assert len(mail.outbox) == 1

    decide(api_client_for(operator), recovery, decision="approve")
    task = advance(task)

    assert task.status == "succeeded"
    assert len(mail.outbox) == 1
    assert Outbox.objects.count() == 1 and ToolExecution.objects.count() == 1
    step = task.steps.get(tool="send_email")
    assert step.status == "succeeded"
    assert step.result["deduplicated"] is True


def test_retry_after_an_effect_that_did_not_happen_runs_it_once(
    crashed, operator, api_client_for
):
    task, recovery, _ = crashed(effect_happened=False)

    decide(api_client_for(operator), recovery, decision="approve")
    task = advance(task)

    assert task.status == "succeeded"
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]


def test_mark_done_records_success_without_running_it_again(
    crashed, operator, api_client_for
):
    task, recovery, script = crashed(effect_happened=False)

    body = decide(api_client_for(operator), recovery, decision="mark_done")
    assert body["status"] == "approved"
    assert body["decision"] == "mark_done"
    task = advance(task)

    assert task.status == "succeeded"
    assert Outbox.objects.count() == 0 and len(mail.outbox) == 0
    step = task.steps.get(tool="send_email")
    assert step.status == "succeeded"
    [answer] = tool_messages(script.requests[-1])
    assert "operator" in answer["content"]


def test_reject_of_a_recovery_request_tells_the_model_why(
    crashed, operator, api_client_for
):
    task, recovery, script = crashed(effect_happened=False)

    decide(
        api_client_for(operator),
        recovery,
        decision="reject",
        reason="The mail server was down; ask the user first",
    )
    task = advance(task)

    assert task.status == "succeeded"
    assert task.steps.get(tool="send_email").status == "rejected"
    [answer] = tool_messages(script.requests[-1])
    assert "The mail server was down" in answer["content"]
    # Not "it did not run": after a crash nobody knows that.
    assert "may have partly happened" in answer["content"]
    assert "did not run" not in answer["content"]
    assert len(mail.outbox) == 0


def test_a_recovery_request_cannot_be_edited(crashed, operator, api_client_for):
    _, recovery, _ = crashed(effect_happened=False)
    response = api_client_for(operator).post(
        decision_url(recovery),
        {"decision": "approve", "arguments": {**EMAIL, "to": "x@example.com"}},
        format="json",
    )
    assert response.status_code == 400
    recovery.refresh_from_db()
    assert recovery.status == "pending"


def test_mark_done_applies_only_to_recovery_requests(
    alice, operator, demo, email_waiting, api_client_for
):
    _, [approval], _ = email_waiting(alice, demo.agent, "ok")
    response = post_decision(api_client_for(operator), approval, decision="mark_done")
    assert response.status_code == 400


def recent_row(page: str, approval: ApprovalRequest) -> str:
    row = page[page.index(f'<tr data-approval="{approval.pk}"') :]
    return row[: row.index("</tr>")]


def test_mark_done_and_retry_are_told_apart_in_the_api_the_history_and_the_queue(
    crashed, operator, api_client_for
):
    _, done, _ = crashed(effect_happened=True)
    _, retried, _ = crashed(effect_happened=False)
    client = api_client_for(operator)

    assert decide(client, done, decision="mark_done")["decision"] == "mark_done"
    body = decide(client, retried, decision="retry")
    assert (body["status"], body["decision"]) == ("approved", "retry")

    listed = {a["id"]: a for a in client.get("/api/approvals/").json()}
    assert listed[str(done.pk)]["decision"] == "mark_done"
    assert listed[str(retried.pk)]["decision"] == "retry"
    # The requests approved before the crash were approvals of the action.
    actions = [a for a in listed.values() if a["kind"] == "action"]
    assert [a["decision"] for a in actions] == ["approve", "approve"]

    for url in ("/approvals/history/", "/approvals/"):
        page = logged_in(operator).get(url).content.decode()
        row = recent_row(page, done)
        assert 'data-decision="mark_done"' in row and "marked done" in row
        assert "retried" not in row
        row = recent_row(page, retried)
        assert 'data-decision="retry"' in row and "retried" in row
        assert "marked done" not in row


def test_approve_on_a_recovery_request_is_recorded_as_a_retry(
    crashed, operator, api_client_for
):
    task, recovery, _ = crashed(effect_happened=False)

    body = decide(api_client_for(operator), recovery, decision="approve")

    assert (body["status"], body["decision"]) == ("approved", "retry")
    assert advance(task).status == "succeeded"
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]


def test_a_retry_runs_the_call_once_like_approve(crashed, operator, api_client_for):
    task, recovery, _ = crashed(effect_happened=False)

    decide(api_client_for(operator), recovery, decision="retry")
    task = advance(task)

    assert task.status == "succeeded"
    assert task.steps.get(tool="send_email").status == "succeeded"
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]
