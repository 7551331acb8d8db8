"""Celery tasks of notify: send one delivery after its commit; the beat's sweep."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.db import transaction

from notify import delivery

log = logging.getLogger(__name__)


@shared_task(name="notify.deliver", acks_late=True)
def deliver(delivery_id: str) -> str | None:
    """Try one delivery now (enqueued after the commit that queued it)."""
    return delivery.delivery_attempt(delivery_id=delivery_id)


@shared_task(name="notify.sweep")
def sweep() -> int:
    """Every due delivery, retries included (on the beat)."""
    return delivery.deliveries_sweep()


def enqueue_delivery(delivery_id: Any) -> None:
    """Enqueue :func:`deliver` once the current transaction commits; a lost
    enqueue is picked up by the sweep."""

    def send() -> None:
        try:
            deliver.apply_async((str(delivery_id),))
        except Exception:  # noqa: BLE001 - the sweep sends it
            log.warning("enqueue of delivery %s failed; the sweep will", delivery_id)

    transaction.on_commit(send)
