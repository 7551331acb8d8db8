"""Queued messages: started when the run they wait for ends, or by the reaper.

A run's finish (:func:`runs.finish._finish_task`, through ``task_finished``)
starts the conversation's next queued message after commit when the run's
``followup_queued`` flag says one waits; a run nobody queued behind costs no
query. A process that died between the finish's commit and that start leaves
the message queued: :func:`queued_reap` (beat, ``agents.reap_queued``) starts
it. Both go through :func:`runs.services.queued_start_next`, which claims the
message with a guarded UPDATE, so it starts exactly once.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from runs import services
from runs.models import QueuedMessage, Task

log = logging.getLogger(__name__)


def on_task_finished(sender: object, task: Task, **_: Any) -> None:
    """Start the next queued message of ``task``'s conversation after commit."""
    if not task.followup_queued:
        return
    conversation_id = task.conversation_id

    def start() -> None:
        try:
            services.queued_start_next(conversation_id=conversation_id)
        except Exception:  # noqa: BLE001 - the reaper starts it
            log.exception(
                "queued message of conversation %s did not start; the reaper "
                "will retry",
                conversation_id,
            )

    transaction.on_commit(start)


def queued_reap() -> list[str]:
    """Start the queued messages whose run ended but which did not start (the
    process that finished it died first); the conversations' ids."""
    grace = timezone.now() - timedelta(seconds=settings.REACH_QUEUED_GRACE_S)
    busy = Task.objects.filter(
        conversation=OuterRef("conversation"), status__in=Task.ACTIVE
    )
    stranded = (
        QueuedMessage.objects.filter(
            state=QueuedMessage.State.QUEUED, created_at__lt=grace
        )
        .filter(~Exists(busy))
        .values_list("conversation_id", flat=True)
        .distinct()[:200]
    )
    started = []
    for conversation_id in list(stranded):
        try:
            services.queued_start_next(conversation_id=conversation_id)
        except Exception:  # noqa: BLE001 - the next round tries again
            log.exception("queued message of %s did not start", conversation_id)
            continue
        started.append(str(conversation_id))
    return started


@shared_task(name="agents.reap_queued")
def reap_queued() -> int:
    return len(queued_reap())
