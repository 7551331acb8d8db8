"""Signing in, in a real Chromium against the real web server: alice sets up an
authenticator and logs in with its code; an approver without one reads the queue
but is shown why they cannot decide."""

from __future__ import annotations

import pytest
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import expect

from tests.support.browser import log_in
from tests.support.cast import EMAIL, PASSWORD
from tests.support.replies import Script, text, tool_call
from tests.support.sign_in import code_from_secret, next_step_time, totp_code
from tests.support.stack import Stack
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NO_DEVICE = (
    "Deciding approvals needs two-factor authentication, and your account has "
    "none yet: set it up at /accounts/two-factor/."
)


def accepts_codes(device: TOTPDevice) -> None:
    """Wait until the device takes codes again after a wrong one."""

    def allowed() -> bool:
        device.refresh_from_db()
        return bool(device.verify_is_allowed()[0])

    wait_for(allowed, timeout=10, what="the device taking codes again")


def test_alice_sets_up_two_factor_then_logs_in_with_a_code(
    browser, stack: Stack, served, demo
):
    served(Script([text("unused")]))
    page = log_in(browser, stack, "alice")

    page.click("a.user")
    expect(page).to_have_url(f"{stack.web_url}/accounts/two-factor/")
    expect(page.locator("[data-qr] svg")).to_be_visible()
    secret = page.locator("[data-secret]").inner_text()

    page.fill("[data-form=confirm] input[name=code]", "000000")
    page.click("[data-form=confirm] button[type=submit]")
    expect(page.locator("[data-error]")).to_have_text(
        "That code is not right. Check the time on your device, then try again."
    )
    # The key stays the same until it is confirmed: the app need not scan again.
    assert page.locator("[data-secret]").inner_text() == secret
    # A wrong code makes the device wait a moment (1 s after the first).
    accepts_codes(TOTPDevice.objects.get(user=demo.alice))

    page.fill("[data-form=confirm] input[name=code]", code_from_secret(secret))
    page.click("[data-form=confirm] button[type=submit]")
    expect(page.locator("[data-codes] li")).to_have_count(10)
    page.click("[data-continue]")
    expect(page).to_have_url(f"{stack.web_url}/")

    page.click("text=Log out")
    expect(page).to_have_url(f"{stack.web_url}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{stack.web_url}/accounts/login/code/")

    device = TOTPDevice.objects.get(user=demo.alice, confirmed=True)
    page.fill("input[name=code]", "123456")
    page.click("button[type=submit]")
    expect(page.locator("[data-error]")).to_contain_text("That code is not right.")
    accepts_codes(device)
    page.fill("input[name=code]", totp_code(device, at=next_step_time(device)))
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{stack.web_url}/", timeout=30_000)
    expect(page.locator("a.user")).to_have_text("alice")


def test_an_approver_without_two_factor_sees_why_they_cannot_decide(
    browser, stack: Stack, served
):
    stack.env["REACH_REQUIRE_2FA"] = "approvers"
    served(Script([tool_call("send_email", EMAIL), text("sent")]))
    operator = log_in(browser, stack, "operator")
    operator.goto("/approvals/")
    expect(operator.locator("[data-second-factor]")).to_contain_text(NO_DEVICE)
    alice = log_in(browser, stack, "alice")

    alice.fill("#message", "Please email the weekly report to ops.")
    alice.press("#message", "Enter")

    # The card arrives live, its buttons disabled and the reason on it.
    card = operator.locator(".approval-card")
    expect(card).to_have_count(1)
    expect(card.locator("[data-decide-refused]")).to_contain_text(NO_DEVICE)
    expect(card.locator("[data-action=approve]")).to_be_disabled()
    expect(card.locator("[data-action=reject]")).to_be_disabled()
    link = card.locator("[data-decide-refused] a")
    expect(link).to_have_attribute("href", "/accounts/two-factor/?next=/approvals/")

    # The server refuses as well, whatever the page allows.
    approval_id = card.get_attribute("data-approval")
    answer = operator.evaluate(
        """async (id) => {
          const csrf = document.querySelector("[name=csrfmiddlewaretoken]").value;
          const r = await fetch(`/api/approvals/${id}/decision/`, {
            method: "POST",
            headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
            body: JSON.stringify({decision: "approve"}),
          });
          return {status: r.status, body: await r.json()};
        }""",
        approval_id,
    )
    assert answer["status"] == 403
    assert answer["body"]["error"] == NO_DEVICE

    link.click()
    expect(operator).to_have_url(
        f"{stack.web_url}/accounts/two-factor/?next=/approvals/"
    )
    expect(operator.locator("[data-required]")).to_contain_text("approvers")
