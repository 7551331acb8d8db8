"""REACH_REQUIRE_2FA naming approvers: an approver without a second factor reads
the queue but decides nothing, on any channel, and is told why."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from rest_framework.test import APIClient

from accounts import services as accounts
from accounts.policy import APPROVER_PERMISSION
from approvals.models import ApprovalRequest
from approvals.services import DECIDE_PERMISSION, DecisionError, approval_decide
from infra.errors import ErrorKind
from tests.support.cast import EMAIL
from tests.support.clients import bearer_client, logged_in, post_decision
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask
from tests.support.sign_in import next_step_time, post_login, totp_code
from tests.support.sockets import next_frame, queue_socket

pytestmark = pytest.mark.django_db(transaction=True)

NO_DEVICE = (
    "Deciding approvals needs two-factor authentication, and your account has "
    "none yet: set it up at /accounts/two-factor/."
)
UNVERIFIED = (
    "Deciding approvals needs two-factor authentication, and this session has "
    "not passed it: enter a code at /accounts/login/code/."
)


@pytest.fixture
def required(settings, flush_redis):
    settings.REACH_REQUIRE_2FA = ["approvers"]


def enrol(user):
    device = accounts.totp_pending(user=user)
    accounts.totp_confirm(user=user, code=totp_code(device))
    return device


def verified_session(user, password: str, device) -> Client:
    """A browser session that logged in with the password and a code."""
    client = Client()
    post_login(client, user.get_username(), password)
    code = totp_code(device, at=next_step_time(device))
    assert client.post("/accounts/login/code/", {"code": code}).status_code == 302
    return client


def session_api(user) -> APIClient:
    """The API with ``user``'s browser session (one that never passed a code)."""
    client = APIClient()
    client.force_login(user)
    return client


def test_the_permission_names_agree():
    assert APPROVER_PERMISSION == DECIDE_PERMISSION


def test_without_a_device_the_api_refuses_the_decision_with_the_reason(
    required, alice, operator, demo, email_waiting
):
    waiting = email_waiting(alice, demo.agent)
    [approval] = waiting.approvals

    for client in (session_api(operator), bearer_client(operator)):
        response = post_decision(client, approval, decision="approve")
        assert response.status_code == 403
        assert response.json()["error"] == NO_DEVICE
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING


def test_the_queue_page_shows_the_cards_with_their_buttons_disabled_and_why(
    required, alice, operator, demo, email_waiting
):
    email_waiting(alice, demo.agent)

    page = logged_in(operator).get("/approvals/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "You can read the queue but not decide: " + NO_DEVICE in html
    assert 'href="/accounts/two-factor/?next=/approvals/"' in html
    assert 'data-decide-refused role="note">' + NO_DEVICE in html
    assert 'disabled title="' + NO_DEVICE + '" data-action="approve">Approve' in html
    assert 'disabled title="' + NO_DEVICE + '" data-action="reject">Reject' in html


def test_with_a_device_and_a_verified_session_the_decision_goes_through(
    required, alice, operator, demo, email_waiting
):
    device = enrol(operator)
    waiting = email_waiting(alice, demo.agent)
    [approval] = waiting.approvals
    client = verified_session(operator, demo.password, device)

    page = client.get("/approvals/").content.decode()
    assert "data-decide-refused" not in page and "disabled" not in page

    response = client.post(
        f"/api/approvals/{approval.pk}/decision/",
        {"decision": "reject", "reason": "not now"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "rejected"


def test_a_session_that_never_passed_the_code_is_refused_though_the_account_has_one(
    required, alice, operator, demo, email_waiting
):
    enrol(operator)
    [approval] = email_waiting(alice, demo.agent).approvals

    # A session from before the device, as force_login makes one.
    response = post_decision(session_api(operator), approval, decision="approve")

    assert response.status_code == 403
    assert response.json()["error"] == UNVERIFIED


def test_a_token_of_an_approver_with_a_device_decides_without_a_code(
    required, alice, operator, demo, email_waiting
):
    enrol(operator)
    [approval] = email_waiting(alice, demo.agent).approvals

    response = post_decision(bearer_client(operator), approval, decision="approve")

    assert response.status_code == 200
    assert response.json()["status"] == "approved"


def test_the_service_refuses_every_other_caller_too(
    required, alice, operator, demo, email_waiting
):
    [approval] = email_waiting(alice, demo.agent).approvals

    with pytest.raises(DecisionError) as refused:
        approval_decide(approval=approval, user=operator, decision="approve")

    assert refused.value.kind is ErrorKind.FORBIDDEN
    assert str(refused.value) == NO_DEVICE


def test_nothing_is_asked_when_the_setting_names_no_role(
    alice, operator, demo, email_waiting
):
    [approval] = email_waiting(alice, demo.agent).approvals

    response = post_decision(session_api(operator), approval, decision="approve")

    assert response.status_code == 200


async def test_live_cards_arrive_with_their_buttons_disabled_and_why(
    required, alice, operator, demo, model
):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    comm = queue_socket(operator)
    connected, _ = await comm.connect()
    assert connected

    await database_sync_to_async(ask)(alice, demo.agent, "Mail the report")

    created = await next_frame(comm, lambda m: m["type"] == "approval", timeout=10)
    assert "data-decide-refused" in created["html"]
    assert NO_DEVICE in created["html"]
    assert 'disabled title="' in created["html"]
    await comm.disconnect()


def test_a_session_signed_in_through_the_identity_provider_decides_without_a_device(
    required, alice, operator, demo, email_waiting
):
    """Single sign-on: the provider did the second factor (README "Single sign-on"),
    so its session decides; the same user's password session without a device
    still may not."""
    from accounts.policy import PROVIDER_SESSION_KEY

    waiting = email_waiting(alice, demo.agent)
    [approval] = waiting.approvals
    password_session = session_api(operator)
    refused = post_decision(password_session, approval, decision="approve")
    assert refused.status_code == 403
    assert refused.json()["error"] == NO_DEVICE

    provider_session = APIClient()
    provider_session.force_login(operator)
    session = provider_session.session
    session[PROVIDER_SESSION_KEY] = "https://idp.example"
    session.save()
    page = provider_session.get("/approvals/").content.decode()
    assert NO_DEVICE not in page
    decided = post_decision(provider_session, approval, decision="approve")
    assert decided.status_code == 200, decided.content
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED
