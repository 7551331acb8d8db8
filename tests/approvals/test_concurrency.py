"""Decisions racing each other, on a file SQLite database and on PostgreSQL.

Real threads, each with its own database connection, released together by a
barrier. Run on PostgreSQL with
``DATABASE_URL=postgres://postgres@127.0.0.1:5432/test pytest -m dbsensitive``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.core import mail
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest, ApprovalVote
from audit.models import AuditEvent
from effects.models import Outbox
from runs import tasks as run_tasks
from runs.models import Step
from tests.support.clients import bearer_client, decision_url
from tests.support.runs import user_in
from tests.support.waiting import at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]


def approvers(count: int) -> list[Any]:
    return [user_in("approvers", f"approver{number}") for number in range(count)]


def bearer(user: Any) -> Any:
    return bearer_client(user, name="race")


def test_fifty_concurrent_decisions_have_exactly_one_winner(alice, demo, email_waiting):
    _, [approval], _ = email_waiting(alice, demo.agent, "sent")
    clients = [bearer(user) for user in approvers(50)]
    url = decision_url(approval)

    def job(number: int, client: APIClient) -> Any:
        body = (
            {"decision": "approve"}
            if number % 2 == 0
            else {"decision": "reject", "reason": f"no, says approver{number}"}
        )
        return client.post(url, body, format="json")

    responses = at_once([lambda n=n, c=c: job(n, c) for n, c in enumerate(clients)])

    errors = [r for r in responses if isinstance(r, BaseException)]
    assert errors == []
    codes = Counter(r.status_code for r in responses)
    assert codes == {200: 1, 409: 49}
    [winner] = [r.json() for r in responses if r.status_code == 200]
    approval.refresh_from_db()
    assert approval.status == winner["status"] in ("approved", "rejected")
    assert approval.decided_by.username == winner["decided_by"]
    assert approval.version == 1
    assert ApprovalVote.objects.filter(approval=approval).count() == (
        1 if approval.status == "approved" else 0
    )
    step = Step.objects.get(pk=approval.step_id)
    assert step.status == approval.status
    decided = AuditEvent.objects.filter(
        kind="approval.decided", object_id=str(approval.pk)
    )
    assert decided.count() == 1


def test_fifty_concurrent_approvals_under_the_two_person_rule_make_one_decision(
    alice, demo, email_waiting
):
    from registry.models import Tool
    from registry.services import tool_save

    tool = Tool.objects.get(name="send_email")
    tool.approvals_required = 2
    tool_save(tool=tool, user=demo.admin)
    _, [approval], _ = email_waiting(alice, demo.agent, "sent")
    clients = [bearer(user) for user in approvers(50)]
    url = decision_url(approval)

    responses = at_once(
        [
            lambda c=c: c.post(url, {"decision": "approve"}, format="json")
            for c in clients
        ]
    )

    assert [r for r in responses if isinstance(r, BaseException)] == []
    bodies = [r.json() for r in responses if r.status_code == 200]
    assert Counter(r.status_code for r in responses) == {200: 2, 409: 48}
    assert sorted(b["status"] for b in bodies) == ["approved", "pending"]
    approval.refresh_from_db()
    assert approval.status == "approved"
    assert ApprovalVote.objects.filter(approval=approval).count() == 2


def test_two_decisions_at_once_on_one_turn_still_resume_the_task(
    alice, demo, email_waiting, monkeypatch
):
    """Each decision enqueues ``advance``; whichever runs last finds nothing pending.

    The enqueue runs the advance in the deciding thread right after its commit,
    as a worker picking it up at once would.
    """
    from runs import tasks

    task, [first_approval, second_approval], _ = email_waiting(
        alice, demo.agent, "Both sent.", also_to="dev@example.com"
    )
    outcomes: list[str] = []

    def run_now(args: Any = (), **_: Any) -> None:
        outcomes.append(run_tasks.task_advance(task_id=args[0]))

    monkeypatch.setattr(tasks.advance, "apply_async", run_now)
    operator, carol = approvers(2)

    from approvals.services import approval_decide

    results = at_once(
        [
            lambda: approval_decide(
                approval=first_approval, user=operator, decision="approve"
            ),
            lambda: approval_decide(
                approval=second_approval, user=carol, decision="approve"
            ),
        ]
    )

    assert [r.status for r in results] == ["approved", "approved"]
    task.refresh_from_db()
    assert task.status == "succeeded", (outcomes, task.error_message)
    assert task.final_answer == "Both sent."
    assert Counter(outcomes)["finished"] == 1
    assert Outbox.objects.count() == 2
    assert sorted(m.to[0] for m in mail.outbox) == [
        "dev@example.com",
        "ops@example.com",
    ]
    assert not ApprovalRequest.objects.filter(task=task, status="pending").exists()
