"""Celery tasks: thin shells that take ids and call one service."""

from __future__ import annotations

from celery import shared_task

# The module, not its names: runs.services imports this module too.
from runs import services


@shared_task(name="agents.advance", acks_late=True, reject_on_worker_lost=True)
def advance(task_id: str) -> str:
    return services.task_advance(task_id=task_id)


@shared_task(name="agents.reap")
def reap() -> int:
    return len(services.tasks_reap())
