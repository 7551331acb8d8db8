"""Who may see and decide approvals: the API, the queue page and the history."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from tests.support.cast import EMAIL
from tests.support.clients import decision_url, logged_in, post_decision
from tests.support.runs import user_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(email_waiting: Any) -> Any:
    """``waiting(user, agent)`` -> a pending email approval of ``user``'s task."""

    def make(user: Any, agent: Any) -> ApprovalRequest:
        [approval] = email_waiting(user, agent, "sent").approvals
        return approval

    return make


def test_an_approver_decides(alice, operator, demo, waiting, api_client_for):
    approval = waiting(alice, demo.agent)
    response = post_decision(api_client_for(operator), approval, decision="approve")
    assert response.status_code == 200
    assert response.json()["status"] == "approved"


def test_chat_users_get_403_on_the_decision_and_the_list(
    alice, bob, demo, waiting, api_client_for
):
    approval = waiting(alice, demo.agent)
    for user in (alice, bob):
        client = api_client_for(user)
        decided = post_decision(client, approval, decision="approve")
        assert decided.status_code == 403
        assert client.get("/api/approvals/").status_code == 403
        assert client.get("/api/approvals/?status=pending").status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_bob_cannot_see_alices_approvals_anywhere(
    alice, bob, demo, waiting, api_client_for
):
    approval = waiting(alice, demo.agent)
    client = api_client_for(bob)
    assert client.get("/api/approvals/").status_code == 403
    assert client.get(f"/api/tasks/{approval.task_id}/").status_code == 404
    browser = logged_in(bob)
    assert browser.get("/approvals/").status_code == 403
    assert browser.get("/approvals/history/").status_code == 403


def test_the_requester_never_approves_their_own_call_even_as_an_approver(
    operator, demo, waiting, api_client_for
):
    approval = waiting(operator, demo.agent)
    client = api_client_for(operator)
    for body in (
        {"decision": "approve"},
        {"decision": "approve", "arguments": {**EMAIL, "to": "me@example.com"}},
        {"decision": "reject", "reason": "changed my mind"},
    ):
        response = post_decision(client, approval, **body)
        assert response.status_code == 403
        assert "own" in response.json()["error"]
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert approval.votes.count() == 0


def test_an_approver_who_is_not_an_auditor_lists_and_decides(
    alice, demo, waiting, api_client_for
):
    dave = user_in("approvers", "dave")
    approval = waiting(alice, demo.agent)
    client = api_client_for(dave)
    listed = client.get("/api/approvals/?status=pending")
    assert listed.status_code == 200
    assert [a["id"] for a in listed.json()] == [str(approval.pk)]
    response = post_decision(client, approval, decision="approve")
    assert response.status_code == 200


def test_an_auditor_who_is_not_an_approver_reads_but_cannot_decide(
    alice, demo, waiting, api_client_for
):
    erin = user_in("auditors", "erin")
    approval = waiting(alice, demo.agent)
    client = api_client_for(erin)
    assert client.get("/api/approvals/").status_code == 200
    response = post_decision(client, approval, decision="approve")
    assert response.status_code == 403
    assert logged_in(erin).get("/approvals/").status_code == 403


def test_unauthenticated_calls_get_401(alice, demo, waiting):
    approval = waiting(alice, demo.agent)
    client = APIClient()
    assert client.get("/api/approvals/").status_code == 401
    response = post_decision(client, approval, decision="approve")
    assert response.status_code == 401
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_the_queue_page_is_403_for_chat_users_and_200_for_approvers(
    alice, bob, operator
):
    for user in (alice, bob):
        assert logged_in(user).get("/approvals/").status_code == 403
        assert logged_in(user).get("/approvals/history/").status_code == 403
    assert logged_in(operator).get("/approvals/").status_code == 200
    assert logged_in(operator).get("/approvals/history/").status_code == 200


def test_an_unknown_approval_is_404_for_an_approver(operator, api_client_for):
    response = api_client_for(operator).post(
        "/api/approvals/00000000-0000-0000-0000-000000000000/decision/",
        {"decision": "approve"},
        format="json",
    )
    assert response.status_code == 404


def test_a_browser_decision_needs_the_csrf_token(alice, operator, demo, waiting):
    approval = waiting(alice, demo.agent)
    client = logged_in(operator, enforce_csrf_checks=True)
    response = client.post(
        decision_url(approval),
        {"decision": "approve"},
        content_type="application/json",
    )
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"
