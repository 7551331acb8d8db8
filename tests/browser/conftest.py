"""Real Chromium (Debian's, driven by Playwright) against the real stack.

The stack fixture runs daphne, a Celery worker and Redis as subprocesses on this
test's database; the model is a scripted server in this process, so each test
scripts it. Users log in through the login form.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PASSWORD
from tests.integration.conftest import Stack, stack  # noqa: F401 - the fixture
from tests.support.scripted_model import Handler, ScriptedModel

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
#: Playwright's waits (ms): generous, the worker shares the CPU with the browser.
TIMEOUT_MS = 30_000


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A headless Chromium; never downloaded (``make chromium`` installs it)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make chromium` (Debian's package).")
    # Playwright's sync API keeps its event loop marked as running in this
    # thread; the ORM calls this test makes between browser calls are plain
    # synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def served(request: pytest.FixtureRequest, demo: Any) -> Iterator[Any]:
    """``served(handler)`` -> the scripted model; starts worker and web against it."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    site: Stack = request.getfixturevalue("stack")
    # The test settings hash with MD5 for speed; daphne runs the real settings.
    hasher = PBKDF2PasswordHasher()
    for user in (demo.alice, demo.bob, demo.operator, demo.admin):
        user.password = hasher.encode(PASSWORD, hasher.salt())
        user.save(update_fields=["password"])
    models: list[ScriptedModel] = []

    def serve(handler: Handler, latency_s: float = 0.0) -> ScriptedModel:
        model = ScriptedModel(handler, latency_s=latency_s).start()
        models.append(model)
        site.env["OPENAI_BASE_URL"] = model.base_url
        site.start_worker()
        site.start_web()
        return model

    yield serve
    site.stop()
    for model in models:
        model.stop()


def log_in(browser: Any, site: Stack, username: str) -> Any:
    """A new browser context logged in through the form; returns its page."""
    from playwright.sync_api import expect

    context = browser.new_context(
        base_url=site.web_url, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{site.web_url}/", timeout=TIMEOUT_MS)
    return page
