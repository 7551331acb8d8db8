"""Issue 14, part 3, in a real Chromium: the API docs work on an offline machine.

Every request that would leave the host is recorded and refused, as it would fail
offline; the docs must render all the same, from the sidecar's assets that
WhiteNoise serves, under the strict Content-Security-Policy.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.support.browser import open_page
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def _leaves_host(url: str) -> bool:
    parts = urlsplit(url)
    # data: and blob: URLs are made in the page; they go nowhere.
    return parts.scheme in ("http", "https", "ws", "wss") and (
        parts.hostname not in LOOPBACK
    )


def test_the_api_docs_render_with_no_request_leaving_the_host(
    browser: Any, stack: Stack
) -> None:
    stack.start_web()
    page = open_page(browser, stack)
    requested: list[str] = []
    refused: list[str] = []
    console: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("console", lambda message: console.append(message.text))

    def offline(route: Any) -> None:
        if _leaves_host(route.request.url):
            refused.append(route.request.url)
            route.abort("internetdisconnected")
        else:
            route.continue_()

    page.context.route("**/*", offline)

    response = page.goto("/api/docs/")
    assert response is not None and response.ok
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy

    # The operations list: the API's endpoints, one block each.
    operations = page.locator(".opblock")
    expect(operations.first).to_be_visible()
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    expect(
        page.locator(".opblock-summary-path[data-path='/api/tasks/']").first
    ).to_be_visible()
    assert operations.count() > 10
    expect(page.locator(".info .title")).to_contain_text("Agent Reach API")

    assert refused == []
    assert [url for url in requested if _leaves_host(url)] == []
    assert any(
        "/static/drf_spectacular_sidecar/swagger-ui-dist/" in u for u in requested
    )
    assert any("/api/docs/?script=" in u for u in requested)
    assert any("/api/schema/" in u for u in requested)
    # Nothing the page needs was refused by the policy.
    assert [m for m in console if "Content Security Policy" in m] == []
