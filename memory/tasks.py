"""Celery tasks of memory: the retention purge (beat, hourly)."""

from __future__ import annotations

from celery import shared_task

from memory.services import memories_purge


@shared_task(name="memory.purge")
def purge() -> int:
    return memories_purge()
