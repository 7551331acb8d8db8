"""Celery tasks of the effects app: the outbox dispatcher."""

from __future__ import annotations

from celery import shared_task

from effects import dispatch


@shared_task(name="agents.dispatch_outbox")
def dispatch_outbox() -> None:
    dispatch.outbox_reset_stuck()
    dispatch.outbox_dispatch()


@shared_task(name="effects.dispatch_mail", acks_late=True)
def dispatch_mail(key: str) -> str | None:
    """Send one queued mail now (enqueued after the commit that queued it)."""
    return dispatch.outbox_dispatch(key=key)
