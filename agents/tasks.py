"""Celery tasks: thin shells that take ids and call one service."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="agents.advance", acks_late=True, reject_on_worker_lost=True)
def advance(task_id: str) -> str:
    from agents.services.runs import task_advance

    return task_advance(task_id=task_id)


@shared_task(name="agents.reap")
def reap() -> int:
    from agents.services.runs import tasks_reap

    return len(tasks_reap())


@shared_task(name="agents.dispatch_outbox")
def dispatch_outbox() -> None:
    from agents.services.effects import outbox_dispatch, outbox_reset_stuck

    outbox_reset_stuck()
    outbox_dispatch()
