"""Celery tasks of the effects app: the outbox dispatcher."""

from __future__ import annotations

from celery import shared_task

# The module, not its names: effects.services imports this module too.
from effects import services


@shared_task(name="agents.dispatch_outbox")
def dispatch_outbox() -> None:
    services.outbox_reset_stuck()
    services.outbox_dispatch()


@shared_task(name="effects.dispatch_mail", acks_late=True)
def dispatch_mail(key: str) -> str | None:
    """Send one queued mail now (enqueued after the commit that queued it)."""
    return services.outbox_dispatch(key=key)
