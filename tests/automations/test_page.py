"""``/schedules/``: a user's own schedules, added, paused, resumed, run now."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent, AuditKind
from automations.models import Schedule
from runs.models import Task
from tests.support.clients import logged_in

pytestmark = pytest.mark.django_db

FORM = {
    "name": "standup",
    "message": "What changed in the notes?",
    "cron": "30 9 * * 1-5",
    "time_zone": "Europe/Paris",
    "missed": "skip",
}


def test_a_user_adds_a_schedule_and_sees_its_next_five_due_times(alice, demo):
    browser = logged_in(alice)
    added = browser.post("/schedules/", FORM | {"agent": demo.agent.pk})
    assert added.status_code == 302
    schedule = Schedule.objects.get(name="standup")
    assert schedule.owner == alice and not schedule.paused
    assert AuditEvent.objects.filter(
        kind=AuditKind.SCHEDULE_SAVED, object_id=str(schedule.pk)
    ).exists()

    page = browser.get("/schedules/").content.decode()
    row = page[page.index(f'data-schedule="{schedule.pk}"') :]
    upcoming = row[row.index('data-testid="upcoming"') : row.index("</ol>")]
    assert upcoming.count("<li>") == 5 and "09:30" in upcoming


def test_a_cron_that_never_fires_is_refused_on_the_page(alice, demo):
    answer = logged_in(alice).post(
        "/schedules/", FORM | {"agent": demo.agent.pk, "cron": "0 0 31 2 *"}
    )
    assert answer.status_code == 200
    assert "never fires" in answer.content.decode()
    assert not Schedule.objects.filter(name="standup").exists()


def test_pause_resume_and_run_now_from_the_page(alice, demo):
    browser = logged_in(alice)
    browser.post("/schedules/", FORM | {"agent": demo.agent.pk})
    schedule = Schedule.objects.get(name="standup")

    browser.post(f"/schedules/{schedule.pk}/pause/")
    schedule.refresh_from_db()
    assert schedule.paused and schedule.paused_reason == "paused by a person"
    browser.post(f"/schedules/{schedule.pk}/resume/")
    schedule.refresh_from_db()
    assert not schedule.paused
    browser.post(f"/schedules/{schedule.pk}/run/")
    assert Task.objects.get(source=schedule.source).owner == alice


def test_bob_neither_sees_nor_acts_on_alices_schedules(alice, bob, demo):
    logged_in(alice).post("/schedules/", FORM | {"agent": demo.agent.pk})
    schedule = Schedule.objects.get(name="standup")
    browser = logged_in(bob)

    assert "standup" not in browser.get("/schedules/").content.decode()
    assert browser.post(f"/schedules/{schedule.pk}/run/").status_code == 404
    assert browser.post(f"/schedules/{schedule.pk}/pause/").status_code == 404
    assert not Task.objects.filter(source=schedule.source).exists()
    schedule.refresh_from_db()
    assert not schedule.paused


def test_the_agent_choice_offers_only_agents_the_user_may_use(alice, bob, demo):
    demo.agent.allowed_users.add(bob)
    answer = logged_in(alice).post("/schedules/", FORM | {"agent": demo.agent.pk})
    assert answer.status_code == 200
    assert "Select a valid choice" in answer.content.decode()
    assert not Schedule.objects.filter(name="standup").exists()
