"""Issue 32, part 2, in a real Chromium: a newcomer signs in through the provider.

The local OpenID provider runs on loopback; the web process (a real server,
configured by its environment as in production) sends Chromium there and back,
exchanges the code and checks the token itself. The newcomer lands in the chat
with the groups the provider's groups map to, and can use it.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from audit.models import AuditEvent, AuditKind
from tests.support.browser import TIMEOUT_MS, open_page
from tests.support.cast import QUESTION
from tests.support.oidc_provider import PROVIDER_NAME, OIDCProvider, sso_env
from tests.support.scripted_model import RedisScript
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def test_a_newcomer_signs_in_with_the_provider_and_lands_in_the_chat_with_mapped_groups(
    browser, stack: Stack, served, oidc_provider: OIDCProvider
):
    stack.env.update(sso_env(oidc_provider))
    served(RedisScript())
    oidc_provider.redirect_uris = [f"{stack.web_url}/oidc/callback/"]
    oidc_provider.sign_in_as(
        sub="00u-carol",
        email="carol@corp.example",
        groups=["idp-approvers", "idp-ops", "everyone"],
    )
    page = open_page(browser, stack)

    page.goto("/accounts/login/")
    button = page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}")
    expect(button).to_be_visible()
    page.screenshot(path="/tmp/reach-sso-login.png")
    button.click()

    expect(page).to_have_url(f"{stack.web_url}/", timeout=TIMEOUT_MS)
    page.wait_for_load_state("load")
    # The browser really went to the provider and back.
    assert [hit.path for hit in oidc_provider.hits if hit.path == "/authorize"] == [
        "/authorize"
    ]
    expect(page.locator(".topbar .user")).to_have_text("carol@corp.example")
    nav = page.locator(".topbar nav")
    # approvers (from idp-approvers) shows the queue; operators (idp-ops) the console.
    expect(nav.get_by_role("link", name="Approvals")).to_be_visible()
    expect(nav.get_by_role("link", name="Console")).to_be_visible()
    expect(nav.get_by_role("link", name="Evals")).to_have_count(
        0
    )  # auditors: not mapped

    carol = get_user_model().objects.get(email="carol@corp.example")
    assert set(carol.groups.values_list("name", flat=True)) == {
        "approvers",
        "operators",
    }
    assert AuditEvent.objects.filter(
        kind=AuditKind.USER_GROUPS_CHANGED, object_id=str(carol.pk)
    ).get().data["added"] == ["approvers", "operators"]

    # And the chat works for her.
    page.fill("#message", QUESTION)
    page.press("#message", "Enter")
    reply = page.locator("[data-reply]").first
    expect(reply).to_contain_text("1088", timeout=TIMEOUT_MS)
    expect(page).to_have_url(re.compile(r"/c/[0-9a-f-]+/$"))
