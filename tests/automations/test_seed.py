"""The demo seed's schedule: one, paused, never fired by a tick."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from automations import services
from automations.models import Schedule
from reach_site.demo import seed_demo

pytestmark = pytest.mark.django_db


def test_the_demo_has_one_paused_schedule_that_no_tick_fires(demo):
    [schedule] = Schedule.objects.all()
    assert schedule.paused and schedule.owner.username == "alice"
    assert schedule.cron == "0 9 * * 1-5" and schedule.time_zone == "Europe/Paris"
    assert services.schedules_tick(now=timezone.now() + timedelta(days=8)) == []
    # Seeding again adds nothing.
    assert not [line for line in seed_demo() if line.startswith("schedule")]
    assert Schedule.objects.count() == 1
