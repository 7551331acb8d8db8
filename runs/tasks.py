"""Celery tasks: thin shells that take ids and call one service."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="agents.advance", acks_late=True, reject_on_worker_lost=True)
def advance(task_id: str) -> str:
    from runs.services import task_advance

    return task_advance(task_id=task_id)


@shared_task(name="agents.reap")
def reap() -> int:
    from runs.services import tasks_reap

    return len(tasks_reap())
