"""Approver routing in a real Chromium: alice's mail about a refund reaches
fiona's queue live (the demo route ``refunds``: payments), says which route and
why, and she approves it; devon (release) never sees it; the operator, an
auditor, reads it with the buttons off."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from approvals.models import ApprovalRequest
from tests.support import cast
from tests.support.browser import log_in, real_password
from tests.support.replies import RecordingHandler, text, tool_call
from tests.support.scripted_model import last_user_index, messages_of
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]

REFUND = {**cast.EMAIL, "subject": "Refund of order 42"}


class RefundScript(RecordingHandler):
    """Mails ops about the refund, then says it is done once it ran."""

    def respond(self, request: dict[str, Any]) -> Any:
        messages = messages_of(request)
        start = last_user_index(messages) or 0
        if any(m.get("role") == "tool" for m in messages[start:]):
            return text("The refund mail is sent.")
        return tool_call("send_email", REFUND)


def test_a_refund_reaches_only_the_payments_queue_live_with_its_route(
    browser, stack: Stack, served
):
    served(RefundScript())
    for name in ("fiona", "devon"):
        real_password(get_user_model().objects.get(username=name), cast.PASSWORD)
    fiona = log_in(browser, stack, "fiona")
    fiona.goto("/approvals/")
    devon = log_in(browser, stack, "devon")
    devon.goto("/approvals/")
    expect(fiona.locator("#queue-empty")).to_be_visible()
    alice = log_in(browser, stack, "alice")

    alice.fill("#message", "Please email ops about the refund of order 42.")
    alice.press("#message", "Enter")
    step = alice.locator("li.step[data-tool='send_email']")
    expect(step).to_have_attribute("data-status", "waiting_approval")

    card = fiona.locator(".approval-card")
    expect(card).to_have_count(1)
    expect(card.locator("[data-route]")).to_contain_text(
        'Route “refunds”: tool send_email, contains(subject, "refund") holds'
    )
    expect(card.get_by_role("button", name="Approve", exact=True)).to_be_enabled()

    operator = log_in(browser, stack, "operator")
    operator.goto("/approvals/")
    read_only = operator.locator(".approval-card")
    expect(read_only).to_have_count(1)
    expect(read_only.locator("[data-decide-refused]")).to_contain_text(
        "routed to other approvers"
    )
    expect(read_only.get_by_role("button", name="Approve", exact=True)).to_be_disabled()

    card.get_by_role("button", name="Approve", exact=True).click()
    expect(fiona.locator(".approval-card")).to_have_count(0)
    expect(step).to_have_attribute("data-status", "succeeded")
    expect(alice.locator("[data-reply]")).to_have_text("The refund mail is sent.")

    # devon's open queue never showed it; after a reload, still nothing.
    expect(devon.locator(".approval-card")).to_have_count(0)
    devon.reload()
    expect(devon.locator(".approval-card")).to_have_count(0)
    approval = ApprovalRequest.objects.get()
    assert (approval.status, approval.decided_by.username) == ("approved", "fiona")
    assert approval.route.name == "refunds"
