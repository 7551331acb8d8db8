"""Done when, tried as a new user would, in a real Chromium on the real stack:
alice tells the agent a preference, starts a new conversation and has it used,
then finds it on her Memory page, corrects it and deletes it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from memory.models import MemoryItem
from tests.support.browser import TIMEOUT_MS, log_in, real_password
from tests.support.cast import PASSWORD
from tests.support.replies import Script, text, tool_call
from tests.support.scripted_model import ScriptedModel
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def answer_from_memory(request: dict[str, Any]) -> Any:
    told = " ".join(
        str(m.get("content")) for m in request["messages"] if m["role"] == "system"
    )
    return text("Je réponds en français." if "French" in told else "In English.")


@pytest.fixture
def site(stack: Stack, demo: Any, companion: Any) -> Iterator[Stack]:
    for user in (demo.alice, demo.admin):
        real_password(user, PASSWORD)
    model = ScriptedModel(
        Script(
            [
                tool_call(
                    "remember",
                    {"subject": "answer language", "fact": "Alice wants French."},
                ),
                text("Noted: French from now on."),
                answer_from_memory,
            ]
        ),
        # A model that answers at once can finish a run before the page's
        # websocket has caught up with the steps written before it connected.
        latency_s=0.4,
    ).start()
    stack.env["OPENAI_BASE_URL"] = model.base_url
    stack.start_worker()
    stack.start_web()
    yield stack
    stack.stop()
    model.stop()


def new_chat_with(page: Any, agent: str) -> None:
    page.goto("/")
    page.select_option("select[name=agent]", agent)
    page.click("form.new-chat button[type=submit]")
    expect(page).to_have_url(re.compile(r"/c/[0-9a-f-]+/$"))


def say(page: Any, message: str) -> Any:
    page.fill("#message", message)
    page.press("#message", "Enter")
    reply = page.locator("[data-reply]").last
    expect(reply).to_be_visible(timeout=TIMEOUT_MS)
    return reply


def test_a_preference_told_once_is_used_later_and_the_user_can_correct_it(
    browser, site
):
    page = log_in(browser, site, "alice")
    new_chat_with(page, "companion")
    expect(say(page, "Please remember that I want answers in French.")).to_contain_text(
        "Noted"
    )
    expect(page.locator("li.step[data-tool='remember']")).to_have_attribute(
        "data-status", "succeeded"
    )

    new_chat_with(page, "companion")
    expect(say(page, "Which language do you answer in?")).to_contain_text("français")
    # The trace shows what the model was told: the memory note, first.
    note = page.locator("li.step[data-kind='note']").first
    expect(note).to_contain_text("Alice wants French.")
    expect(note).to_have_attribute("data-seq", "1")

    page.click("header nav a:has-text('Memory')")
    item = page.locator("li.memory").first
    expect(item).to_contain_text("Alice wants French.")
    expect(item.locator("a", has_text="run ")).to_have_attribute(
        "href", re.compile(r"^/traces/[0-9a-f-]+/$")
    )
    item.locator("summary", has_text="Edit").click()
    item.locator("textarea[name=text]").fill("Alice wants German.")
    item.locator("button", has_text="Save changes").click()
    expect(page.locator("li.memory").first).to_contain_text("Alice wants German.")
    assert MemoryItem.objects.get().text == "Alice wants German."
    page.screenshot(path="/tmp/reach-memory.png", full_page=True)

    item = page.locator("li.memory").first
    item.locator("summary", has_text="Delete").click()
    item.locator("button", has_text="Delete").click()
    expect(page.locator("[data-testid=memories]")).to_contain_text(
        "Nothing is remembered about you yet"
    )
    assert not MemoryItem.objects.exists()
