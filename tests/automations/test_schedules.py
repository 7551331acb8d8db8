"""Schedules against the real database: one run per due time, with racing
ticks (PostgreSQL too), after downtime, as their owner, paused when the owner
may no longer run them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission

from audit.models import AuditEvent, AuditKind
from automations import services
from automations.cadence import CadenceError
from automations.models import Schedule
from reach_site.celery import app as celery_app
from runs.models import Task
from tests.support.clients import logged_in
from tests.support.racing import at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]

T0 = datetime(2026, 3, 27, 8, 0, tzinfo=UTC)


def hourly(owner, agent, *, missed=Schedule.Missed.SKIP, **fields) -> Schedule:
    """A schedule of ``owner`` due at every hour on the hour, next at 09:00."""
    fields.setdefault("name", "hourly digest")
    schedule = Schedule(
        owner=owner,
        agent=agent,
        message="Summarise the new tickets.",
        cron="0 * * * *",
        missed=missed,
        **fields,
    )
    services.schedule_check(schedule, now=T0)
    schedule.created_at = T0
    schedule.next_due_at = schedule.cadence().next_after(T0)
    schedule.save()
    return schedule


def runs_of(schedule: Schedule) -> list[Task]:
    return list(Task.objects.filter(source=schedule.source).order_by("created_at"))


def test_a_due_schedule_starts_one_run_as_its_owner(alice, demo):
    schedule = hourly(alice, demo.agent)
    assert schedule.next_due_at == T0 + timedelta(hours=1)
    assert services.schedules_tick(now=T0 + timedelta(minutes=59)) == []

    [task] = services.schedules_tick(now=T0 + timedelta(hours=1, seconds=3))
    assert task.owner == alice and task.goal == "Summarise the new tickets."
    assert task.source == f"schedule:{schedule.pk}"
    assert task.conversation.title == "hourly digest"
    schedule.refresh_from_db()
    assert schedule.next_due_at == T0 + timedelta(hours=2)
    assert schedule.last_task_id == task.pk
    # The same due time again (a second beat a moment later): nothing.
    assert services.schedules_tick(now=T0 + timedelta(hours=1, seconds=9)) == []
    assert len(runs_of(schedule)) == 1
    assert AuditEvent.objects.filter(
        kind=AuditKind.SCHEDULE_FIRED, task_id=str(task.pk)
    ).exists()


def test_two_concurrent_ticks_start_one_run_per_due_time(alice, demo):
    schedules = [hourly(alice, demo.agent) for _ in range(3)]
    due = T0 + timedelta(hours=1, seconds=1)

    results = at_once([lambda: services.schedules_tick(now=due)] * 4)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sum(len(r) for r in results) == 3
    for schedule in schedules:
        assert len(runs_of(schedule)) == 1
    # The next due time, raced again: one more each.
    results = at_once(
        [lambda: services.schedules_tick(now=due + timedelta(hours=1))] * 4
    )
    assert sum(len(r) for r in results) == 3
    for schedule in schedules:
        assert len(runs_of(schedule)) == 2


def test_after_downtime_skip_starts_nothing_and_moves_on(alice, demo):
    schedule = hourly(alice, demo.agent, missed=Schedule.Missed.SKIP)
    back = T0 + timedelta(hours=5, minutes=20)  # 09:00 … 13:00 were missed

    assert services.schedules_tick(now=back) == []
    assert services.schedules_tick(now=back + timedelta(seconds=15)) == []
    schedule.refresh_from_db()
    assert schedule.next_due_at == T0 + timedelta(hours=6)
    assert runs_of(schedule) == []
    # The next due time on time: its run.
    assert len(services.schedules_tick(now=T0 + timedelta(hours=6, seconds=2))) == 1


def test_after_downtime_run_once_starts_exactly_one_run(alice, demo):
    schedule = hourly(alice, demo.agent, missed=Schedule.Missed.RUN_ONCE)
    back = T0 + timedelta(hours=5, minutes=20)

    results = at_once([lambda: services.schedules_tick(now=back)] * 3)
    assert sum(len(r) for r in results if not isinstance(r, BaseException)) == 1
    assert services.schedules_tick(now=back + timedelta(seconds=15)) == []
    assert len(runs_of(schedule)) == 1
    schedule.refresh_from_db()
    assert schedule.next_due_at == T0 + timedelta(hours=6)


def test_a_deactivated_owner_pauses_the_schedule_with_the_reason(alice, demo):
    schedule = hourly(alice, demo.agent)
    alice.is_active = False
    alice.save()

    assert services.schedules_tick(now=T0 + timedelta(hours=1)) == []
    schedule.refresh_from_db()
    assert schedule.paused
    assert schedule.paused_reason == "The owner alice is deactivated."
    assert runs_of(schedule) == []
    event = AuditEvent.objects.get(kind=AuditKind.SCHEDULE_PAUSED)
    assert event.data["reason"] == "The owner alice is deactivated."
    # Paused: later due times start nothing either.
    assert services.schedules_tick(now=T0 + timedelta(hours=3)) == []


def test_an_owner_who_lost_the_agent_pauses_the_schedule(alice, bob, demo):
    schedule = hourly(alice, demo.agent)
    demo.agent.allowed_users.add(bob)

    assert services.schedules_tick(now=T0 + timedelta(hours=1)) == []
    schedule.refresh_from_db()
    assert schedule.paused
    assert "may no longer use assistant" in schedule.paused_reason
    with pytest.raises(services.ScheduleRefused, match="may no longer use"):
        services.schedule_run_now(schedule=schedule, user=alice)


def test_pause_resume_and_run_now_are_audited(alice, demo):
    schedule = hourly(alice, demo.agent)
    services.schedule_pause(schedule=schedule, user=alice, reason="holiday")
    assert services.schedules_tick(now=T0 + timedelta(hours=1)) == []

    task = services.schedule_run_now(schedule=schedule, user=alice)
    assert task.source == schedule.source and task.owner == alice

    schedule = services.schedule_resume(schedule=schedule, user=alice)
    assert not schedule.paused and schedule.next_due_at > T0 + timedelta(hours=1)
    kinds = list(
        AuditEvent.objects.filter(object_id=str(schedule.pk)).values_list(
            "kind", flat=True
        )
    )
    assert kinds == [
        AuditKind.SCHEDULE_PAUSED,
        AuditKind.SCHEDULE_RUN_NOW,
        AuditKind.SCHEDULE_RESUMED,
    ]


def test_saving_refuses_a_cadence_that_fires_too_often(alice, demo, settings):
    settings.REACH_SCHEDULE_MIN_INTERVAL_S = 300
    schedule = Schedule(
        name="spam", owner=alice, agent=demo.agent, message="hi", cron="*/2 * * * *"
    )
    with pytest.raises(CadenceError, match="minimum interval, 300 s"):
        services.schedule_save(schedule=schedule, user=alice)
    assert not Schedule.objects.filter(name="spam").exists()


def test_beat_sends_the_tick_and_the_worker_knows_it():
    celery_app.loader.import_default_modules()  # what a worker does at start
    sent = {entry["task"] for entry in celery_app.conf.beat_schedule.values()}
    for name in ("automations.tick", "agents.reap_queued"):
        assert name in sent
        assert name in celery_app.tasks


def test_the_trace_names_its_schedule_and_the_list_filters_by_it(alice, operator, demo):
    schedule = hourly(alice, demo.agent)
    [task] = services.schedules_tick(now=T0 + timedelta(hours=1))
    other = services.schedule_run_now(
        schedule=hourly(alice, demo.agent, name="other"), user=alice
    )
    browser = logged_in(alice)

    page = browser.get(f"/traces/{task.pk}/").content.decode()
    assert 'data-testid="source"' in page and "schedule hourly digest" in page
    assert f"?source=schedule%3A{schedule.pk}" in page
    listed = browser.get(f"/traces/?source=schedule:{schedule.pk}").content.decode()
    assert str(task.pk) in listed and str(other.pk) not in listed
    assert browser.get(f"/api/tasks/{task.pk}/").json()["source"] == schedule.source


def test_the_admin_shows_an_owners_own_schedules_and_five_due_times(alice, bob, demo):
    alice.is_staff = True
    alice.save()
    alice.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="automations", codename__endswith="_schedule"
        )
    )
    mine = hourly(alice, demo.agent, name="mine")
    theirs = hourly(bob, demo.agent, name="theirs")
    browser = logged_in(alice)

    listing = browser.get("/admin/automations/schedule/").content.decode()
    assert "mine" in listing and "theirs" not in listing
    assert browser.get(
        f"/admin/automations/schedule/{theirs.pk}/change/"
    ).status_code in (302, 403, 404)
    page = browser.get(f"/admin/automations/schedule/{mine.pk}/change/").content
    assert page.decode().count("<li>") >= 5 and b"data-testid='upcoming'" in page

    refused = browser.post(
        "/admin/automations/schedule/add/",
        {
            "name": "never",
            "owner": alice.pk,
            "agent": demo.agent.pk,
            "message": "hi",
            "cron": "0 0 30 2 *",
            "time_zone": "UTC",
            "missed": "skip",
        },
    )
    assert refused.status_code == 200
    assert "never fires" in refused.content.decode()
    form = {
        "name": "weekday digest",
        "agent": demo.agent.pk,
        "message": "hi",
        "cron": "0 9 * * 1-5",
        "time_zone": "Europe/Paris",
        "missed": "run_once",
    }
    # Bob is not hers to name as the owner: the form offers only herself.
    as_bob = browser.post("/admin/automations/schedule/add/", form | {"owner": bob.pk})
    assert as_bob.status_code == 200
    assert "Select a valid choice" in as_bob.content.decode()
    created = browser.post(
        "/admin/automations/schedule/add/", form | {"owner": alice.pk}
    )
    assert created.status_code == 302
    schedule = Schedule.objects.get(name="weekday digest")
    assert schedule.owner == alice and schedule.next_due_at is not None
    assert AuditEvent.objects.filter(
        kind=AuditKind.SCHEDULE_SAVED, object_id=str(schedule.pk)
    ).exists()
