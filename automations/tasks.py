"""Celery tasks: thin shells over the services."""

from __future__ import annotations

from celery import shared_task

from automations import services


@shared_task(name="automations.tick")
def tick() -> int:
    """Fire the schedules that are due (beat sends it, reach_site/schedule.py)."""
    return len(services.schedules_tick())
