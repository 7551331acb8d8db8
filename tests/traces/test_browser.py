"""The replay player in a real Chromium, against the web server serving the real app."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.browser import open_page, real_password, sign_in
from tests.support.cast import PASSWORD, QUESTION
from tests.support.runs import ask
from tests.support.scripted_model import RedisScript, ScriptedModel
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def test_the_replay_player_plays_steps_and_pauses_the_recorded_run(
    stack: Stack, browser: Any, alice: Any, demo: Any, use_model: Any
) -> None:
    from playwright.sync_api import expect

    with ScriptedModel(RedisScript(), latency_s=0.25) as model:
        use_model(model)
        task = ask(alice, demo.agent, QUESTION)
    assert task.status == "succeeded", task.error_message
    real_password(alice, PASSWORD)
    stack.start_web()
    page = open_page(browser, stack)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on(
        "console",
        lambda m: (
            problems.append(m.text)
            if m.type == "error" and "Failed to load resource" not in m.text
            else None
        ),
    )
    # Resources are checked by URL (the browser asks for a favicon on its own).
    page.on(
        "response",
        lambda r: (
            problems.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )

    sign_in(page, stack, "alice")
    page.goto(f"/traces/{task.pk}/")

    player = page.locator("#replay")
    stage = player.locator("[data-stage] > li")
    expect(player).to_have_attribute("data-state", "ready")
    frames = page.evaluate(
        "JSON.parse(document.getElementById('replay-data').textContent)"
    )
    total = len(frames["frames"])
    assert total >= 8  # five steps, the calls' running frames, the reply
    # The timing bars were positioned by the module (no inline styles allowed).
    left = page.eval_on_selector(".overview .lane-bar", "el => el.style.left")
    assert left.endswith("%")

    # Step: one frame at a time, showing what the chat showed then.
    player.locator("[data-action=step]").click()
    expect(player).to_have_attribute("data-position", "1")
    expect(stage).to_have_count(1)
    expect(stage.first).to_have_attribute("data-kind", "model_call")
    player.locator("[data-action=step]").click()
    expect(stage).to_have_count(2)
    expect(stage.nth(1)).to_have_attribute("data-status", "running")
    player.locator("[data-action=step]").click()
    expect(stage.nth(1)).to_have_attribute("data-status", "succeeded")
    expect(stage).to_have_count(2)

    # Play at the original speed: the gaps between frames are the recorded ones.
    player.locator("[data-action=reset]").click()
    expect(stage).to_have_count(0)
    started = time.monotonic()
    player.locator("[data-action=play]").click()
    expect(player).to_have_attribute("data-state", "playing")
    player.locator("[data-action=pause]").click()
    expect(player).to_have_attribute("data-state", "paused")
    paused_at = int(player.get_attribute("data-position") or 0)
    assert paused_at < total
    started = time.monotonic()
    player.locator("[data-action=play]").click()
    expect(player).to_have_attribute("data-state", "ended")
    elapsed = time.monotonic() - started
    recorded_s = frames["duration_ms"] / 1000
    assert recorded_s >= 0.5  # three model calls of 0.25 s each
    assert elapsed >= 0.7 * recorded_s - 0.1
    assert elapsed <= recorded_s + 5
    expect(player).to_have_attribute("data-position", str(total))
    expect(stage).to_have_count(5)
    for index in range(5):
        expect(stage.nth(index)).to_have_attribute("data-status", "succeeded")
    expect(player.locator("[data-reply-slot] .bubble.assistant")).to_contain_text(
        "1088"
    )

    # Faster: 100x replays the whole run almost at once.
    player.locator("[data-action=speed]").select_option("100")
    started = time.monotonic()
    player.locator("[data-action=play]").click()
    expect(player).to_have_attribute("data-state", "ended")
    assert time.monotonic() - started < max(1.5, recorded_s)
    expect(stage).to_have_count(5)
    # The stage holds copies: the timeline's step ids stay unique.
    assert page.locator(f"#step-{task.pk}-1").count() == 1
    assert problems == []
