"""Trace retention: purge old traces, leave an audit tombstone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from audit.models import AuditKind
from audit.purge import purge_in_batches
from runs.models import Conversation, Message, Task

#: Tasks deleted per purge transaction (each batch leaves one tombstone).
PURGE_BATCH = 500


def _purgeable(cutoff: Any) -> Any:
    # Local runs age from when they finished; imported ones from their import.
    return Task.objects.filter(
        Q(origin__isnull=True, finished_at__lt=cutoff)
        | Q(origin__isnull=False, updated_at__lt=cutoff)
    )


def _delete_traces(ids: list[Any]) -> None:
    """Delete tasks (their steps go with them), their messages and emptied chats."""
    conversations = set(
        Task.objects.filter(pk__in=ids).values_list("conversation_id", flat=True)
    )
    # The goal and the reply are payloads of the run too.
    Message.objects.filter(task_id__in=ids).delete()
    Task.objects.filter(pk__in=ids).delete()
    Conversation.objects.filter(pk__in=conversations, tasks=None).filter(
        messages=None
    ).delete()


def traces_purge(*, now: Any = None) -> int:
    """Delete finished traces older than the retention; leave an audit tombstone.

    A trace's task, steps, approvals and chat messages go; the audit log stays
    whole (its rows hold no payloads) and gains one ``traces.purged`` event per
    batch naming the deleted tasks. Returns the number of tasks deleted.
    """
    days = settings.REACH_TRACE_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    return purge_in_batches(
        _purgeable(cutoff),
        delete=_delete_traces,
        cutoff=cutoff,
        kind=AuditKind.TRACES_PURGED,
        object_type="task",
        listed_as="tasks",
        batch=PURGE_BATCH,
    )
