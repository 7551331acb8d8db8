"""The reply shows as the model writes it, in a real Chromium against the stack."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.browser import TIMEOUT_MS, log_in
from tests.support.replies import Script, slow_stream, text, tool_call
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]

FIRST_WORDS = "Streaming works:"
ANSWER = FIRST_WORDS + " every word of this answer arrives on its own." * 8


def test_the_first_words_are_on_the_page_before_the_call_ends(
    browser: Any, stack: Stack, served: Any
) -> None:
    # A call whose arguments take a few seconds to write (JSON allows the spaces).
    slow_call = tool_call(
        "calculate", '{"expression": "128 * 6 + 320"' + " " * 240 + "}"
    )
    model = served(
        Script(
            [
                slow_stream(text(ANSWER), 0.05),
                slow_stream(slow_call, 0.05),
                text("The total is 1088."),
            ]
        )
    )
    model.stream_chunk_chars = 4  # ~100 chunks: five seconds of writing
    page = log_in(browser, stack, "alice")

    page.fill("#message", "Say something long.")
    page.press("#message", "Enter")

    live = page.locator("[data-live-reply]")
    expect(live).to_contain_text(FIRST_WORDS, timeout=TIMEOUT_MS)
    # Provisional: the call has not ended, nothing of it is recorded yet.
    assert page.locator("li.step[data-kind='model_call']").count() == 0
    assert page.locator("[data-reply]").count() == 0
    shown = live.locator(".text").inner_text()
    assert ANSWER.startswith(shown) and len(shown) < len(ANSWER)

    # The recorded step replaces it, and the answer is the whole reply.
    reply = page.locator("[data-reply]").first
    expect(reply).to_have_text(ANSWER, timeout=TIMEOUT_MS)
    expect(live).to_have_count(0)
    expect(page.locator("li.step[data-kind='model_call']")).to_have_count(1)
    page.screenshot(path="/tmp/reach-streaming.png", full_page=True)

    # A tool call being written shows its name, never its arguments.
    page.fill("#message", "Add up the budget.")
    page.press("#message", "Enter")
    second = page.locator("article.turn").nth(1)
    preparing = second.locator("[data-live-reply] .preparing")
    expect(preparing).to_have_text("preparing `calculate`…", timeout=TIMEOUT_MS)
    assert "128" not in second.locator("[data-live-reply]").inner_text()
    assert second.locator("li.step[data-tool='calculate']").count() == 0
    expect(second.locator("[data-reply]")).to_have_text(
        "The total is 1088.", timeout=TIMEOUT_MS
    )
    expect(second.locator("[data-live-reply]")).to_have_count(0)
    expect(second.locator("li.step[data-tool='calculate']")).to_contain_text(
        "128 * 6 + 320"
    )
