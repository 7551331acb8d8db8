"""Two real beat processes (the Django one and the light one) and a real worker
fire a schedule: one run per due time, never two."""

from __future__ import annotations

from collections import Counter

import pytest

from audit.models import AuditEvent, AuditKind
from automations import services
from automations.models import Schedule
from runs.models import Task
from tests.support.stack import Stack
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


def test_two_beats_fire_each_due_time_of_a_schedule_once(stack: Stack, demo, settings):
    settings.REACH_SCHEDULE_MIN_INTERVAL_S = 2
    schedule = services.schedule_save(
        schedule=Schedule(
            name="every two seconds",
            owner=demo.alice,
            agent=demo.agent,
            message="tick",
            interval_s=2,
        ),
        user=demo.admin,
    )
    # Both beats send the tick twice a second; the worker runs them at once.
    stack.env["REACH_REAPER_INTERVAL_S"] = "0.5"
    stack.start_worker(concurrency=8)
    stack.start_beat("beat-django", app="reach_site")
    stack.start_beat("beat-light", app="reach_site.beat")

    wait_for(
        lambda: Task.objects.filter(source=schedule.source).count() >= 4,
        timeout=60,
        what="four scheduled runs",
        detail=lambda: stack.procs["worker"].tail(),
    )
    services.schedule_pause(schedule=schedule, user=demo.admin, reason="test over")
    stack.procs["beat-django"].stop()
    stack.procs["beat-light"].stop()

    fired = [
        e.data["due_at"]
        for e in AuditEvent.objects.filter(
            kind=AuditKind.SCHEDULE_FIRED, object_id=str(schedule.pk)
        )
    ]
    repeated = {due: n for due, n in Counter(fired).items() if n > 1}
    assert not repeated, repeated
    runs = Task.objects.filter(source=schedule.source)
    assert runs.count() == len(fired)
    assert all(task.owner_id == demo.alice.pk for task in runs)
