"""Celery tasks of the effects app: the outbox dispatcher."""

from __future__ import annotations

from celery import shared_task

from effects.services import outbox_dispatch, outbox_reset_stuck


@shared_task(name="agents.dispatch_outbox")
def dispatch_outbox() -> None:
    outbox_reset_stuck()
    outbox_dispatch()
