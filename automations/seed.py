"""The demo's schedule (``manage.py seed_demo``): paused, to show the shape."""

from __future__ import annotations

from typing import Any

from automations import services
from automations.models import Schedule

DEMO_SCHEDULE = "weekday notes digest"


def seed_demo_schedule(*, owner: Any, agent: Any) -> list[str]:
    """A paused schedule of ``owner``: weekdays at 09:00 in Europe/Paris."""
    if Schedule.objects.filter(name=DEMO_SCHEDULE).exists():
        return []
    schedule = Schedule(
        name=DEMO_SCHEDULE,
        owner=owner,
        agent=agent,
        message="Search the notes for Redis and give me the budget it names.",
        cron="0 9 * * 1-5",
        time_zone="Europe/Paris",
        missed=Schedule.Missed.SKIP,
        paused=True,
        paused_reason="a demo: resume it in Admin → Schedules",
    )
    services.schedule_save(schedule=schedule, user=None)
    return [f"schedule {DEMO_SCHEDULE} (paused)"]
