"""Trace services: the append-only audit log, its verification and retention.

The audit log carries no payloads: ids, kinds, actors, times and a hash chain.
Each event's hash covers its content and the previous event's hash, so editing,
deleting or reordering rows breaks the chain where it happened.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.models import AuditEvent, AuditHead, AuditKind
from engine.canonical import canonical_json
from infra.runtime import redactor

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
    """The sha256 of an event's canonical content, its position and its link."""
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


def _redact(value: Any) -> Any:
    return redactor().data(value)


def audit_append(
    *,
    kind: AuditKind | str,
    actor: Any = None,
    task_id: Any = "",
    object_type: str = "",
    object_id: Any = "",
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the chain, under a lock on the chain head.

    The head row is locked (``select_for_update`` on PostgreSQL; SQLite's
    IMMEDIATE transactions take the write lock up front), so concurrent appends
    queue instead of forking the chain; ``position`` is unique as a backstop.
    Everything recorded passes the redactor (a failed login's user name can be
    a pasted password). ``kind`` is an :class:`AuditKind` (tests append kinds of
    their own).

    Inside a caller's transaction the append joins it, with no savepoint of its
    own (two statements fewer): an append that fails fails the caller's whole
    transaction, which no caller goes on from.
    """
    with transaction.atomic(savepoint=False):
        head, _ = AuditHead.objects.select_for_update().get_or_create(pk=1)
        event = AuditEvent(
            position=head.position + 1,
            kind=str(kind),
            actor=_redact(_actor_name(actor))[:150],
            task_id=str(task_id or ""),
            object_type=object_type,
            object_id=_redact(str(object_id or ""))[:200],
            data=_redact(data or {}),
            at=timezone.now(),
            prev_hash=head.hash,
        )
        event.hash = event_hash(event)
        event.save()
        head.position = event.position
        head.hash = event.hash
        head.save(update_fields=["position", "hash"])
    return event


def audit_failed_login(sender: object, credentials: dict[str, Any], **_: Any) -> None:
    """Receiver of ``user_login_failed`` (connected in ``AuditConfig.ready``);
    a wrong second-factor code says so (``stage``)."""
    stage = credentials.get("stage")
    audit_append(
        kind=AuditKind.AUTH_LOGIN_FAILED,
        actor="anonymous",
        object_type="user",
        object_id=str(credentials.get("username", ""))[:150],
        data={"stage": str(stage)} if stage else None,
    )


def audit_task(
    kind: AuditKind | str,
    *,
    task_id: Any,
    actor: Any = None,
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append an event about one task (the task is also the event's object)."""
    return audit_append(
        kind=kind,
        actor=actor,
        task_id=task_id,
        object_type="task",
        object_id=task_id,
        data=data,
    )


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
    if head is not None and head.position and head.hash != previous:
        problems.append("the chain head does not match the last event (tail removed?)")
    return count, problems


def audit_event_payload(event: AuditEvent) -> dict[str, Any]:
    """One audit event as JSON (exports, the JSON-lines log, trace documents)."""
    return {
        "position": event.position,
        "kind": event.kind,
        "actor": event.actor,
        "task": event.task_id or None,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "data": event.data,
        "at": event.at.isoformat(),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def audit_json_lines(*, after: int = 0, limit: int | None = None) -> Iterator[str]:
    """The log from ``after`` (a position) on, one JSON object per line."""
    events = AuditEvent.objects.filter(position__gt=after).order_by("position")
    if limit is not None:
        events = events[:limit]
    for event in events.iterator(chunk_size=500):
        yield json.dumps(audit_event_payload(event), ensure_ascii=False) + "\n"
