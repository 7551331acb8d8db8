"""Issue 29, item 2, in a real Chromium: alice rates an answer in the chat, changes
her mind, comments; the trace shows it and a reload keeps it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from feedback.models import Feedback
from tests.support.browser import TIMEOUT_MS, log_in
from tests.support.cast import QUESTION
from tests.support.scripted_model import RedisScript
from tests.support.stack import Stack
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def test_alice_gives_a_thumbs_down_with_a_comment_from_the_chat(
    browser: Any, stack: Stack, served: Any
) -> None:
    served(RedisScript())
    page = log_in(browser, stack, "alice")
    page.fill("#message", QUESTION)
    page.press("#message", "Enter")
    reply = page.locator("[data-reply]").first
    expect(reply).to_contain_text("1088", timeout=TIMEOUT_MS)

    # The controls appear under the answer that arrived live.
    box = page.locator("[data-feedback]").first
    up = box.get_by_role("button", name="Helpful", exact=True)
    down = box.get_by_role("button", name="Not helpful")
    expect(up).to_have_attribute("aria-pressed", "false")
    up.click()
    expect(up).to_have_attribute("aria-pressed", "true")
    down.click()
    expect(down).to_have_attribute("aria-pressed", "true")
    expect(up).to_have_attribute("aria-pressed", "false")
    box.get_by_label("Comment on the answer").fill("the sum skips the second plan")
    box.get_by_role("button", name="Save comment").click()
    expect(box.locator("[data-feedback-status]")).to_have_text(
        "Thanks: marked not helpful."
    )
    wait_for(
        lambda: Feedback.objects.filter(
            rating="down", comment="the sum skips the second plan"
        ).exists()
    )
    row = Feedback.objects.get()

    # A reload shows what she chose; the trace shows it too.
    page.reload()
    box = page.locator("[data-feedback]").first
    expect(box.get_by_role("button", name="Not helpful")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(box.get_by_label("Comment on the answer")).to_have_value(
        "the sum skips the second plan"
    )
    page.screenshot(path="/tmp/reach-feedback.png", full_page=True)
    page.goto(f"{stack.web_url}/traces/{row.task_id}/")
    expect(page.get_by_test_id("feedback")).to_contain_text("not helpful")
    expect(page.get_by_test_id("feedback")).to_contain_text(
        "the sum skips the second plan"
    )
