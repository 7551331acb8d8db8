"""Issue 2, item 2, in a real Chromium: alice asks the Redis question in the chat."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from runs.services import conversation_create
from tests.support.browser import TIMEOUT_MS, log_in, sign_in
from tests.support.cast import QUESTION
from tests.support.scripted_model import RedisScript
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]

FOLLOW_UP = "刚才的总和再加 12 是多少？"


def step(page: Any, seq: int) -> Any:
    return page.locator(f"li.step[data-seq='{seq}']").first


def test_alice_watches_the_redis_question_run_live_and_finds_it_after_a_reload(
    browser, stack: Stack, served
):
    model = served(RedisScript(), latency_s=0.4)
    page = log_in(browser, stack, "alice")

    page.fill("#message", QUESTION)
    page.press("#message", "Enter")

    # Steps arrive live, while the run is still going.
    search = page.locator("li.step[data-tool='search_notes']")
    expect(search).to_be_visible()
    expect(page.locator("[data-reply]")).to_have_count(0)
    reply = page.locator("[data-reply]").first
    expect(reply).to_contain_text("缓存改造", timeout=TIMEOUT_MS)
    expect(reply).to_contain_text("1088")
    expect(page).to_have_url(re.compile(r"/c/[0-9a-f-]+/$"))

    def check_steps() -> None:
        steps = page.locator("li.step")
        expect(steps).to_have_count(5)
        kinds = [steps.nth(i).get_attribute("data-kind") for i in range(5)]
        assert kinds == [
            "model_call",
            "tool_call",
            "model_call",
            "tool_call",
            "model_call",
        ]
        for i in range(5):
            expect(steps.nth(i)).to_have_attribute("data-status", "succeeded")
            expect(steps.nth(i).locator(".duration")).to_have_text(
                re.compile(r"^\d+(\.\d+)? m?s$")
            )
        search = step(page, 2)
        expect(search.locator("code.tool")).to_have_text("search_notes")
        expect(search.locator(".kv", has_text="arguments")).to_contain_text(
            '{"keyword": "Redis"}'
        )
        expect(search.locator(".kv", has_text="result")).to_contain_text("缓存改造")
        calc = step(page, 4)
        expect(calc.locator("code.tool")).to_have_text("calculate")
        expect(calc.locator(".kv", has_text="arguments")).to_contain_text(
            '{"expression": "128 * 6 + 320"}'
        )
        expect(calc.locator(".kv", has_text="result")).to_contain_text('"result": 1088')
        expect(page.locator("[data-task-status]").first).to_have_text("succeeded")

    check_steps()
    page.screenshot(path="/tmp/reach-chat.png", full_page=True)

    page.reload()
    check_steps()
    expect(page.locator("[data-reply]").first).to_contain_text("1088")
    expect(page.locator(".bubble.user").first).to_have_text(QUESTION)

    # A follow-up in the same conversation sees the earlier turn.
    page.fill("#message", FOLLOW_UP)
    page.press("#message", "Enter")
    second = page.locator("article.turn").nth(1)
    expect(second.locator(".bubble.user")).to_have_text(FOLLOW_UP)
    expect(second.locator("[data-reply]")).to_contain_text("1100", timeout=TIMEOUT_MS)
    expect(second.locator("li.step[data-tool='calculate']")).to_contain_text(
        "1088 + 12"
    )
    sent = model.handler.requests[-1]["messages"]
    contents = [m.get("content") for m in sent]
    assert QUESTION in contents
    assert any("1088" in str(c) for c in contents if c != QUESTION)
    page.screenshot(path="/tmp/reach-chat-follow-up.png", full_page=True)


def test_a_chat_left_open_across_a_new_log_in_says_to_reload_it(
    browser, stack: Stack, served
):
    served(RedisScript())
    page = log_in(browser, stack, "alice")
    # Another tab of the same browser logs out and in again: a new session,
    # a new CSRF token; the first tab still holds the old one.
    other = page.context.new_page()
    other.goto("/")
    other.get_by_role("button", name="Log out").click()
    sign_in(other, stack, "alice")

    page.fill("#message", QUESTION)
    page.press("#message", "Enter")

    expect(page.locator("#composer-error")).to_contain_text(
        "Reload the page, then send it again"
    )
    expect(page.locator("#composer-error")).not_to_contain_text("CSRF")


def test_a_long_conversation_list_and_long_lines_keep_the_chat_in_view(
    browser, stack: Stack, served, demo
):
    served(RedisScript())
    for _ in range(60):
        conversation_create(owner=demo.alice, agent=demo.agent)
    page = log_in(browser, stack, "alice")
    page.locator(".conversations li a").nth(30).click()
    page.wait_for_load_state("load")
    unbroken = "x" * 3000

    page.fill("#message", f"first line\nsecond line {unbroken}")
    page.press("#message", "Enter")

    mine = page.locator(".bubble.user").last
    expect(mine).to_be_in_viewport()
    expect(page.locator("#message")).to_be_in_viewport()
    # The page itself neither scrolls down past the chat nor grows sideways.
    assert page.evaluate("window.scrollY") == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # The line break typed shows in the live bubble too (innerText follows what
    # is drawn: a collapsed break reads as a space).
    assert mine.inner_text().startswith("first line\nsecond line")


def test_a_message_over_the_limit_stays_in_the_box_with_a_reason(
    browser, stack: Stack, served
):
    served(RedisScript())
    page = log_in(browser, stack, "alice")
    too_long = "字" * 8001  # REACH_MAX_MESSAGE_CHARS: 8000 characters

    page.fill("#message", too_long)
    page.press("#message", "Enter")

    expect(page.locator("#composer-error")).to_contain_text(
        "8001 characters long; at most 8000"
    )
    assert page.input_value("#message") == too_long
    expect(page.locator(".bubble.user")).to_have_count(0)
    page.fill("#message", "   ")
    page.press("#message", "Enter")
    expect(page.locator("#composer-error")).to_have_text("Type a message first.")


def test_while_the_model_thinks_the_turn_says_what_it_waits_on(
    browser, stack: Stack, served
):
    served(RedisScript(), latency_s=1.5)
    page = log_in(browser, stack, "alice")
    waiting = (
        "() => { const turn = [...document.querySelectorAll('.turn')].pop();"
        " return turn ? getComputedStyle(turn.querySelector('[data-steps]'),"
        " '::after').content : null; }"
    )

    page.fill("#message", QUESTION)
    page.press("#message", "Enter")

    # Polled (wait_for_function evaluates a string, which the page's CSP forbids).
    seen = set()
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while '"waiting for the model…"' not in seen and time.monotonic() < deadline:
        seen.add(page.evaluate(waiting))
        page.wait_for_timeout(50)
    assert '"waiting for the model…"' in seen, seen
    expect(page.locator("[data-reply]")).to_be_visible()
    assert page.evaluate(waiting) == "none"
