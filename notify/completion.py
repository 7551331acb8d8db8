"""Completion webhooks: a run's outcome posted to the URL its conversation names
(set through the API, or by the schedule or trigger that started it) when the
run ends (``run.finished``) or parks for an approval (``run.parked``).

``runs`` sends ``task_outcome`` inside the transaction that writes the task's
final state or its park; the receiver here queues the delivery in that same
transaction (:func:`notify.services.queue_webhook`, the outbox every webhook
goes through), so a run whose state commits has its webhook queued, and one
rolled back has none. Each delivery has a key of its event (the run, and for a
park the task's ``rev`` then), so the same event processed twice is queued once.
A run without a URL costs one attribute check in ``runs`` (no receiver runs):
the URL is copied onto the task when it starts (``Task.webhook_url``), a row
both writes hold already.

One signing secret for the whole install (:data:`SECRET_NAME`, generated on
first use, shown in the admin): a receiver of several conversations, schedules
and triggers checks one secret, and nobody who can create a conversation picks
or reads one. ``REACH_SECRET_COMPLETION_WEBHOOK`` overrides the stored one.
"""

from __future__ import annotations

import secrets
import uuid
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from audit.models import AuditKind
from audit.services import audit_append
from infra.runtime import redactor
from notify.models import Delivery
from notify.payloads import queue_url
from notify.services import NotifyError, queue_webhook
from registry.adapters.http import internal_hosts
from registry.payloads import iso
from registry.secrets import secret_set, secret_value
from runs import ports
from runs.models import Task
from runs.payloads import usd

#: The secret (registry.secrets) that signs every completion webhook.
SECRET_NAME = "COMPLETION_WEBHOOK"


class CompletionEvent(StrEnum):
    """What a completion webhook's ``event`` says happened to the run."""

    RUN_FINISHED = "run.finished"
    RUN_PARKED = "run.parked"


def on_task_outcome(sender: Any, *, task: Task, parked: bool, **_: Any) -> None:
    """``runs.ports.task_outcome``'s receiver, inside the transaction of the
    task's final state or its park (an evaluation's runs post nothing)."""
    if task.webhook_url and task.eval_case is None:
        event = CompletionEvent.RUN_PARKED if parked else CompletionEvent.RUN_FINISHED
        completion_queue(task=task, event=event)


def completion_key(task: Task, event: CompletionEvent) -> str:
    """The delivery's key: a run finishes once; it may park several times, each
    at its own ``rev``."""
    if event is CompletionEvent.RUN_PARKED:
        return f"{event}:{task.pk}:{task.rev}"
    return f"{event}:{task.pk}"


def completion_queue(*, task: Task, event: CompletionEvent) -> Delivery:
    """Queue ``task``'s completion webhook in the caller's transaction, once
    per event; sent after commit, retried with backoff.

    A URL the SSRF rules refuse now (``REACH_INTERNAL_HOSTS`` changed since it
    was set) is recorded as a failed delivery, audited, and nothing is sent:
    the run's own write never fails for its webhook.
    """
    key = completion_key(task, event)
    existing = Delivery.objects.filter(key=key).first()
    if existing is not None:
        return existing
    completion_secret()
    payload = completion_payload(task, event)
    hosts = internal_hosts()
    try:
        return queue_webhook(
            task.webhook_url,
            SECRET_NAME,
            str(event),
            payload,
            key=key,
            allowed_hosts=hosts,
        )
    except NotifyError as refused:
        return _refused(
            key=key,
            url=task.webhook_url,
            hosts=hosts,
            event=event,
            payload=payload,
            error=refused.message,
        )


def completion_payload(task: Task, event: CompletionEvent) -> dict[str, Any]:
    """What the webhook says of the run (beside its ``id``, ``event`` and
    ``created_at``), redacted; a park lists the requests it waits for."""
    body: dict[str, Any] = {
        "task": str(task.pk),
        "conversation": str(task.conversation_id),
        "status": task.status,
        "answer": task.final_answer,
        "stop_reason": task.stop_reason,
        "error": task.error_message or None,
        "cost": {
            "usd": usd(task.cost_usd),
            "prompt_tokens": task.prompt_tokens,
            "completion_tokens": task.completion_tokens,
            "total_tokens": task.total_tokens,
            "steps": task.step_count,
        },
        "trace_url": _public(ports.trace_url()(task.pk)),
        "source": task.source or None,
        "finished_at": iso(task.finished_at),
    }
    if event is CompletionEvent.RUN_PARKED:
        body["approvals"] = [
            {
                "id": str(approval.pk),
                "tool": approval.tool,
                "preview": approval.preview,
                "expires_at": iso(approval.expires_at),
                "url": queue_url(approval),
            }
            for approval in ApprovalRequest.objects.filter(
                task_id=task.pk, status=ApprovalRequest.Status.PENDING
            ).order_by("requested_at")
        ]
    return dict(redactor().data(body))


def _public(path: str) -> str:
    return f"{settings.REACH_PUBLIC_URL.rstrip('/')}{path}"


def _refused(
    *,
    key: str,
    url: str,
    hosts: list[str],
    event: CompletionEvent,
    payload: dict[str, Any],
    error: str,
) -> Delivery:
    delivery_id = uuid.uuid4()
    now = timezone.now()
    delivery, created = Delivery.objects.get_or_create(
        key=key,
        defaults={
            "id": delivery_id,
            "channel": Delivery.Channel.WEBHOOK,
            "event": str(event),
            "url": url,
            "allowed_hosts": hosts,
            "secret_name": SECRET_NAME,
            "payload": {
                "id": str(delivery_id),
                "event": str(event),
                "created_at": now.isoformat(),
                **payload,
            },
            "status": Delivery.Status.FAILED,
            "last_error": error[:2000],
        },
    )
    if created:
        audit_append(
            kind=AuditKind.NOTIFY_DELIVERY_FAILED,
            actor="system",
            object_type="delivery",
            object_id=delivery.pk,
            data={
                "event": str(event),
                "channel": Delivery.Channel.WEBHOOK,
                "target": None,
                "attempts": 0,
                "status_code": None,
                "error": error[:300],
            },
        )
    return delivery


# -- the secret -------------------------------------------------------------------


def completion_secret(*, by: Any = "system") -> str:
    """The install's completion webhook secret, generated (and audited) the
    first time it is needed."""
    value = secret_value(SECRET_NAME)
    if value:
        return value
    return completion_secret_rotate(by=by)


def completion_secret_rotate(*, by: Any) -> str:
    """A new random completion webhook secret, stored encrypted; audited.
    Deliveries not yet sent are signed with it (each is signed when sent)."""
    value = secrets.token_urlsafe(32)
    with transaction.atomic():
        secret_set(name=SECRET_NAME, value=value)
        audit_append(
            kind=AuditKind.NOTIFY_SECRET_GENERATED,
            actor=by,
            object_type="completion_webhook",
            object_id=SECRET_NAME,
            data={"secret": SECRET_NAME},
        )
    return value
