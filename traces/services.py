"""Trace services: the append-only audit log (more in later modules)."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.engine.canonical import canonical_json
from traces.models import AuditEvent, AuditHead

GENESIS = "0" * 64


def _actor_name(actor: Any) -> str:
    if actor is None:
        return ""
    if isinstance(actor, str):
        return actor
    if getattr(actor, "is_authenticated", False):
        return str(actor.get_username())
    return ""


def event_hash(event: AuditEvent) -> str:
    body = canonical_json(
        {
            "position": event.position,
            "kind": event.kind,
            "actor": event.actor,
            "task_id": event.task_id,
            "object_type": event.object_type,
            "object_id": event.object_id,
            "data": event.data,
            "at": event.at.isoformat(),
            "prev_hash": event.prev_hash,
        }
    )
    return hashlib.sha256(body.encode()).hexdigest()


def audit_append(
    *,
    kind: str,
    actor: Any = None,
    task_id: Any = "",
    object_type: str = "",
    object_id: Any = "",
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the chain, under a lock on the chain head."""
    with transaction.atomic():
        head, _ = AuditHead.objects.select_for_update().get_or_create(pk=1)
        event = AuditEvent(
            position=head.position + 1,
            kind=kind,
            actor=_actor_name(actor),
            task_id=str(task_id or ""),
            object_type=object_type,
            object_id=str(object_id or ""),
            data=data or {},
            at=timezone.now(),
            prev_hash=head.hash,
        )
        event.hash = event_hash(event)
        event.save()
        head.position = event.position
        head.hash = event.hash
        head.save(update_fields=["position", "hash"])
    return event


def audit_verify() -> tuple[int, list[str]]:
    """Check every event's hash and link; return (count checked, problems)."""
    problems: list[str] = []
    previous = GENESIS
    expected_position = 1
    count = 0
    for event in AuditEvent.objects.order_by("position").iterator():
        count += 1
        if event.position != expected_position:
            problems.append(
                f"position {expected_position} is missing (found {event.position})"
            )
            expected_position = event.position
        if event.prev_hash != previous:
            problems.append(f"event {event.position}: link to the previous is broken")
        if event_hash(event) != event.hash:
            problems.append(f"event {event.position}: content does not match its hash")
        previous = event.hash
        expected_position += 1
    head = AuditHead.objects.filter(pk=1).first()
    if head is not None and count and head.hash != previous:
        problems.append("the chain head does not match the last event (tail removed?)")
    return count, problems


def traces_purge() -> int:
    """Delete finished traces older than the retention; leave an audit tombstone."""
    from datetime import timedelta

    from django.conf import settings

    from agents.models import Task

    days = settings.REACH_TRACE_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = timezone.now() - timedelta(days=days)
    old = Task.objects.filter(finished_at__lt=cutoff)
    ids = [str(pk) for pk in old.values_list("pk", flat=True)[:1000]]
    if not ids:
        return 0
    with transaction.atomic():
        Task.objects.filter(pk__in=ids).delete()
        audit_append(
            kind="traces.purged",
            actor="system",
            object_type="task",
            data={"count": len(ids), "before": cutoff.isoformat(), "tasks": ids},
        )
    return len(ids)
