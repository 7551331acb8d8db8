"""A message sent while a run goes on, in a real Chromium: shown queued, then
started when the run ends, live (issue 30, part 2)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runs.models import QueuedMessage, Task
from tests.support.browser import TIMEOUT_MS, log_in
from tests.support.replies import Script, delay, text
from tests.support.stack import Stack
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def test_a_second_message_shows_queued_then_runs_when_the_first_ends(
    browser, stack: Stack, served
):
    # The first answer takes a while: the second message is sent meanwhile.
    served(Script([delay(4.0, text("first answer")), text("second answer")]))
    page = log_in(browser, stack, "alice")

    page.fill("#message", "the first question")
    page.press("#message", "Enter")
    first = page.locator("article.turn[data-task]").first
    expect(first.locator("[data-task-status]")).to_have_text("running")
    # The box stays open while it runs: this conversation queues.
    expect(page.locator("#message")).to_be_enabled()

    page.fill("#message", "the second question")
    page.press("#message", "Enter")
    queued = page.locator("[data-testid='queued-message']")
    expect(queued).to_have_count(1)
    expect(queued.locator("[data-queued-state]")).to_have_text("queued")
    expect(queued).to_contain_text("the second question")
    assert QueuedMessage.objects.get().state == QueuedMessage.State.QUEUED

    # A reload while it waits shows it queued as well (server-rendered).
    page.reload()
    expect(
        page.locator("[data-testid='queued-message'] [data-queued-state]")
    ).to_have_text("queued")

    # The first run ends; the queued message starts and runs live.
    expect(page.locator("[data-reply]").first).to_contain_text(
        "first answer", timeout=TIMEOUT_MS
    )
    second = page.locator("article.turn[data-task]").nth(1)
    expect(second).to_contain_text("the second question", timeout=TIMEOUT_MS)
    expect(second.locator("[data-queued-state]")).to_have_count(0)
    expect(second.locator("[data-reply]")).to_contain_text(
        "second answer", timeout=TIMEOUT_MS
    )
    started = wait_for(
        lambda: QueuedMessage.objects.filter(state=QueuedMessage.State.STARTED).first(),
        what="the queued message started",
    )
    assert Task.objects.get(pk=started.task_id).goal == "the second question"
    assert Task.objects.count() == 2
