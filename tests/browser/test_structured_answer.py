"""Issue 28, item 3, in a real Chromium: a structured answer is drawn as a table,
live from the socket and again after a reload."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from registry.models import Agent
from runs.services import conversation_create
from tests.support.browser import TIMEOUT_MS, log_in
from tests.support.replies import Script, text

pytestmark = [pytest.mark.browser, pytest.mark.integration]

ANSWER = {
    "summary": "缓存改造 mentions Redis.",
    "plans": [{"plan": "缓存改造", "budget": 1088}, {"plan": "<b>x</b>", "budget": 5}],
}


def test_the_extractors_answer_is_a_table_live_and_after_a_reload(
    browser, stack, served, demo
):
    served(Script([text(json.dumps(ANSWER, ensure_ascii=False))]))
    extractor = Agent.objects.get(name="extractor")
    conversation = conversation_create(owner=demo.alice, agent=extractor)
    page = log_in(browser, stack, "alice")
    page.goto(f"{stack.web_url}/c/{conversation.pk}/")
    page.fill("#message", "Which plan mentions Redis?")
    page.press("#message", "Enter")

    def check() -> None:
        table = page.locator("[data-reply] [data-answer-json] table.answer-json").first
        expect(table).to_be_visible(timeout=TIMEOUT_MS)
        expect(table.locator("th").first).to_have_text("summary")
        plans = table.locator("table.answer-json")
        expect(plans.locator("thead th")).to_have_text(["plan", "budget"])
        expect(plans.locator("tbody tr")).to_have_count(2)
        expect(plans.locator("tbody tr").first).to_contain_text("1088")
        # Model output is text, never markup.
        expect(plans.locator("tbody tr").nth(1).locator("td").first).to_have_text(
            "<b>x</b>"
        )
        expect(page.locator("[data-reply] b")).to_have_count(0)

    check()
    page.reload()
    check()
