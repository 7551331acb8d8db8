"""Real Chromium (Debian's, driven by Playwright) against the real stack.

The stack fixture runs daphne, a Celery worker and Redis as subprocesses on this
test's database; the model is a scripted server in this process, so each test
scripts it. Users log in through the login form.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import PASSWORD
from tests.integration.conftest import Stack, stack  # noqa: F401 - the fixture
from tests.support.browser import TIMEOUT_MS, real_password
from tests.support.scripted_model import Handler, ScriptedModel


@pytest.fixture
def served(request: pytest.FixtureRequest, demo: Any) -> Iterator[Any]:
    """``served(handler)`` -> the scripted model; starts worker and web against it."""
    site: Stack = request.getfixturevalue("stack")
    for user in (demo.alice, demo.bob, demo.operator, demo.admin):
        real_password(user, PASSWORD)
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
