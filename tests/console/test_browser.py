"""The console in a real Chromium against the web server: it updates without a
reload, keeps what the operator ticked, and cancels in bulk."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs import leases as run_leases
from runs.models import Task
from tests.support.browser import log_in, real_password
from tests.support.cast import PASSWORD
from tests.support.runs import start

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def stuck_run(user: Any, agent: Any) -> Task:
    task = start(user, agent, "a run whose worker died")
    assert run_leases.task_claim(task_id=task.pk, owner="deadhost:999:0badf00d")
    Task.objects.filter(pk=task.pk).update(
        lease_expires_at=timezone.now() - dt.timedelta(minutes=5)
    )
    return task


def test_a_stuck_run_appears_live_and_is_cancelled_in_bulk(browser, stack, demo):
    real_password(demo.operator, PASSWORD)
    stack.start_web()
    page = log_in(browser, stack, "operator")
    page.goto("/console/")
    expect(page.locator('[data-section="stuck"] h2')).to_contain_text("(0)")
    page.evaluate("window.consoleNotReloaded = true")

    first = stuck_run(demo.alice, demo.agent)
    second = stuck_run(demo.bob, demo.agent)

    row = page.locator(f'tr[data-task="{first.pk}"][data-state="stuck"]')
    expect(row).to_be_visible()
    expect(page.locator(f'tr[data-task="{second.pk}"]')).to_be_visible()
    assert page.evaluate("window.consoleNotReloaded") is True
    row.locator('input[type="checkbox"]').check()
    page.locator(f'tr[data-task="{second.pk}"] input[type="checkbox"]').check()
    # A refresh later the ticks are kept.
    as_of = page.get_by_test_id("as-of").inner_text()
    expect(page.get_by_test_id("as-of")).not_to_have_text(as_of)
    expect(row.locator('input[type="checkbox"]')).to_be_checked()

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("bulk-cancel").click()

    expect(page.locator(".flash")).to_contain_text("Cancelled 2 runs")
    expect(page.locator('[data-section="stuck"] h2')).to_contain_text("(0)")
    assert set(
        Task.objects.filter(pk__in=[first.pk, second.pk]).values_list(
            "status", flat=True
        )
    ) == {"cancelled"}
