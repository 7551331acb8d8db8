"""Issue 27, items 3 and 7 in a real Chromium: the approval mail that decides, and
the queue on a phone.

Alice's email waits for approval; the worker queues a notice per approver and the
dispatcher sends it (the file backend under the test's var/). The operator opens
the approve link from that file on a 390 px wide screen, signs in, lands on the
confirmation page and approves; alice's run goes on. The queue and the
confirmation page fit the width: nothing scrolls sideways, the buttons are within
reach, the arguments wrap.
"""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from approvals.models import ApprovalLinkUse, ApprovalRequest
from tests.support import cast
from tests.support.browser import TIMEOUT_MS, log_in, real_password
from tests.support.replies import Script, text, tool_call
from tests.support.scripted_model import ScriptedModel
from tests.support.stack import Stack
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.integration]

PHONE = {"width": 390, "height": 844}
#: An argument with no place to break: it must wrap, not widen the page.
UNBROKEN = "https://tracker.example.com/reports/" + "weekly-" * 30 + "attached"
EMAIL = {**cast.EMAIL, "body": f"Hello ops, the weekly report: {UNBROKEN}"}
ANSWER = "Done: the report went to ops@example.com."
LINK = re.compile(r"^(http://\S+/approvals/\S+/confirm/\?t=\S+)$", re.M)


@pytest.fixture
def mailing(stack: Stack, demo: Any, tmp_path: Path) -> Iterator[Stack]:
    """The stack with approval mail on: web first, so the worker composes the
    links with the web's real address (``REACH_PUBLIC_URL``)."""
    for user in (demo.alice, demo.operator):
        real_password(user, cast.PASSWORD)
    model = ScriptedModel(
        Script([tool_call("send_email", EMAIL), text(ANSWER)])
    ).start()
    stack.env["OPENAI_BASE_URL"] = model.base_url
    stack.env["REACH_APPROVAL_EMAILS"] = "true"
    stack.start_web()
    stack.env["REACH_PUBLIC_URL"] = stack.web_url
    stack.start_worker()
    yield stack
    stack.stop()
    model.stop()


def sent_mail(mail_dir: Path, to: str) -> EmailMessage:
    """The one mail the file backend wrote to ``to``."""

    def find() -> EmailMessage | None:
        if not mail_dir.exists():
            return None
        for path in mail_dir.iterdir():
            for raw in path.read_bytes().split(b"\n" + b"-" * 79 + b"\n"):
                message = email.message_from_bytes(
                    raw.strip(), policy=email.policy.default
                )
                if message["To"] == to and isinstance(message, EmailMessage):
                    return message
        return None

    return wait_for(find, TIMEOUT_MS / 1000, what=f"the mail to {to}")


def body_of(message: EmailMessage) -> str:
    return str(message.get_content())


def phone_page(browser: Any, site: Stack) -> Any:
    context = browser.new_context(base_url=site.web_url, viewport=PHONE)
    context.set_default_timeout(TIMEOUT_MS)
    return context.new_page()


def assert_fits_the_phone(page: Any, shot: str) -> None:
    """No horizontal scroll; every visible button and field within the width."""
    page.screenshot(path=shot, full_page=True)
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= PHONE["width"], f"{page.url} is {width}px wide"
    for control in page.locator(
        "main button:visible, main textarea:visible, main input:visible"
    ).all():
        box = control.bounding_box()
        assert box is not None
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    args = page.locator("pre[data-args]").first
    box = args.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    expect(args).to_contain_text("attached")


def test_the_operator_approves_from_the_mailed_link_on_a_phone(
    browser, mailing: Stack, tmp_path: Path
):
    alice = log_in(browser, mailing, "alice")
    alice.fill("#message", "Please email the weekly report to ops.")
    alice.press("#message", "Enter")
    waiting = alice.locator("li.step[data-tool='send_email']")
    expect(waiting).to_have_attribute("data-status", "waiting_approval")

    # The real notice, as the dispatcher sent it.
    message = sent_mail(tmp_path / "mail", "operator@example.com")
    body = body_of(message)
    assert cast.EMAIL_PREVIEW in message["Subject"]
    assert cast.EMAIL_PREVIEW in body
    assert UNBROKEN in body
    approve_url, reject_url = LINK.findall(body)
    assert urlsplit(approve_url).netloc == urlsplit(mailing.web_url).netloc
    approval = ApprovalRequest.objects.get()

    # Signed out, the link leads through the login and back to itself.
    phone = phone_page(browser, mailing)
    phone.goto(approve_url)
    expect(phone).to_have_url(re.compile(r"/accounts/login/\?next="))
    phone.fill("input[name=username]", "operator")
    phone.fill("input[name=password]", cast.PASSWORD)
    phone.click("button[type=submit]")
    expect(phone).to_have_url(approve_url)
    card = phone.locator(f"#approval-{approval.pk}")
    expect(card.locator("[data-preview]")).to_have_text(cast.EMAIL_PREVIEW)
    expect(card.locator("pre[data-args]")).to_contain_text('"to": "ops@example.com"')
    expect(card.locator("[data-reasons]")).to_be_visible()
    approve = card.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_visible()
    # Opening it decided nothing.
    assert ApprovalRequest.objects.get().status == "pending"
    assert_fits_the_phone(phone, "/tmp/reach-mail-link-confirm-390.png")

    # The reject link's page, with its reason field, fits as well (and decides
    # nothing: its form was not sent).
    rejecting = phone.context.new_page()
    rejecting.goto(reject_url)
    expect(rejecting.locator("textarea[name=reason]")).to_be_visible()
    expect(rejecting.get_by_role("button", name="Reject", exact=True)).to_be_visible()
    assert_fits_the_phone(rejecting, "/tmp/reach-mail-link-reject-390.png")
    rejecting.close()

    # The queue on the same phone, the card still pending.
    queue = phone.context.new_page()
    queue.goto("/approvals/")
    expect(queue.locator(".approval-card")).to_have_count(1)
    assert_fits_the_phone(queue, "/tmp/reach-approvals-390.png")
    queue.close()

    approve.click()
    expect(phone.locator("[data-done]")).to_contain_text("Done.")
    expect(phone.locator("[data-decided-by]")).to_have_text("operator")
    assert_fits_the_phone(phone, "/tmp/reach-mail-link-done-390.png")
    decided = ApprovalRequest.objects.get()
    assert (decided.status, decided.decided_by.username) == ("approved", "operator")
    assert ApprovalLinkUse.objects.get().user.username == "operator"

    # Alice's run goes on, live.
    expect(waiting).to_have_attribute("data-status", "succeeded")
    expect(alice.locator("[data-reply]")).to_have_text(ANSWER)

    # The other link now says who decided, and decides nothing.
    refused = phone.goto(reject_url)
    assert refused is not None and refused.status == 409
    expect(phone.locator("[data-refused]")).to_have_attribute("data-refused", "decided")
    expect(phone.locator("[data-decided-by]")).to_have_text("operator")
    assert_refusal_fits(phone)

    # And the queue, with the decision in its recent list, still fits.
    phone.goto("/approvals/")
    expect(phone.locator("#recent-decisions")).to_contain_text(cast.EMAIL_PREVIEW)
    phone.screenshot(path="/tmp/reach-approvals-decided-390.png", full_page=True)
    assert phone.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]


def assert_refusal_fits(page: Any) -> None:
    page.screenshot(path="/tmp/reach-mail-link-refused-390.png", full_page=True)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
