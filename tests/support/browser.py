"""Debian's Chromium through Playwright (never a downloaded browser)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cast import PASSWORD

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
    """A headless Chromium; ``make chromium`` installs it (Debian's package)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make chromium` (Debian's package).")
    # Playwright's sync API keeps its event loop marked as running in this
    # thread; the ORM calls a test makes between browser calls are plain
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


def real_password(user: Any, password: str) -> None:
    """Hash with the real hasher: tests use MD5, the web process the real settings."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode(password, hasher.salt())
    user.save(update_fields=["password"])


def open_page(browser: Any, site: Any) -> Any:
    """A page in a new browser context (one person) on ``site.web_url``."""
    context = browser.new_context(
        base_url=site.web_url, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(TIMEOUT_MS)
    return context.new_page()


def sign_in(page: Any, site: Any, username: str) -> Any:
    """Log ``page`` in as ``username`` through the login form."""
    from playwright.sync_api import expect

    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{site.web_url}/", timeout=TIMEOUT_MS)
    # The URL changes when the navigation commits; the page's module scripts (the
    # chat's Enter-to-send among them) run later, before "load". A test that
    # types at once must not race them.
    page.wait_for_load_state("load")
    return page


def log_in(browser: Any, site: Any, username: str) -> Any:
    """A new browser context logged in through the form; returns its page."""
    return sign_in(open_page(browser, site), site, username)
