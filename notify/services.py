"""Notify services: which targets hear of a request, queueing what they are
sent (in the request's transaction), and the targets' secrets."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.models import ApprovalRequest
from audit.models import AuditKind
from audit.services import audit_append
from infra.errors import ServiceError
from notify import webhooks
from notify.models import Delivery, NotifyTarget
from notify.payloads import event_of, event_payload
from notify.tasks import enqueue_delivery
from registry.secrets import secret_set


class NotifyError(ServiceError):
    """A webhook or target that cannot be used (an invalid one by default)."""


def targets_for(request: ApprovalRequest) -> list[NotifyTarget]:
    """The enabled targets that announce ``request`` (the one place that
    decides): every target marked ``for_all``, and those of its route."""
    wanted = Q(for_all=True)
    if request.route_id is not None:
        wanted |= Q(routes=request.route_id)
    return list(NotifyTarget.objects.filter(wanted, enabled=True).distinct())


def on_approval_changed(sender: Any, approval_id: Any, **_: Any) -> None:
    """``approvals.events.approval_changed``'s receiver: queue what the change
    announces, in the transaction that made it (nothing at all when no target
    is enabled: one query)."""
    if not NotifyTarget.objects.filter(enabled=True).exists():
        return
    approval = (
        ApprovalRequest.objects.select_related(
            "task", "requested_by", "decided_by", "route"
        )
        .filter(pk=approval_id)
        .first()
    )
    # An evaluation's requests are decided by its simulated approver: nobody
    # hears of them.
    if approval is None or approval.task.eval_case is not None:
        return
    approval_announce(approval=approval)


def approval_announce(*, approval: ApprovalRequest) -> list[Delivery]:
    """Queue the deliveries ``approval``'s current state announces to each of
    its targets (none for a vote), once each; sent after commit."""
    event = event_of(approval)
    if event is None:
        return []
    queued = []
    payload: dict[str, Any] | None = None
    for target in targets_for(approval):
        key = f"{event}:{approval.pk}:{target.pk}"
        if target.is_slack:
            # A Slack message always follows its request to the end.
            queued.append(
                _queue(
                    key=key,
                    channel=Delivery.Channel.SLACK,
                    target=target,
                    event=event,
                    approval_id=str(approval.pk),
                    payload={
                        "target_kind": target.kind,
                        "channel": target.slack_channel,
                    },
                )
            )
        elif target.wants(event):
            payload = payload if payload is not None else event_payload(approval)
            queued.append(
                queue_webhook(
                    target,
                    target.secret_name,
                    event,
                    payload,
                    key=key,
                    approval_id=str(approval.pk),
                )
            )
    return queued


def queue_webhook(
    target_or_url: NotifyTarget | str,
    secret: str,
    event: str,
    payload: dict[str, Any],
    *,
    key: str | None = None,
    allowed_hosts: list[str] | None = None,
    approval_id: str = "",
) -> Delivery:
    """Queue one signed webhook POST in the caller's transaction (once per
    ``key``), sent after commit and retried with backoff until delivered.

    ``target_or_url``: a webhook :class:`NotifyTarget` (its URL and allowed
    addresses), or a URL (``allowed_hosts`` then lists the non-public addresses
    it may reach). ``secret`` names the secret in the store that signs it. The
    body is ``{"id", "event", "created_at", **payload}``; raises
    :class:`NotifyError` for a URL the SSRF rules refuse or a missing secret.
    """
    if isinstance(target_or_url, NotifyTarget):
        target: NotifyTarget | None = target_or_url
        url = target_or_url.url
        hosts = list(allowed_hosts or target_or_url.allowed_hosts or [])
    else:
        target, url, hosts = None, target_or_url, list(allowed_hosts or [])
    problem = webhooks.url_problem(url, hosts)
    if problem:
        raise NotifyError(f"The webhook URL cannot be used: {problem}")
    if not secret:
        raise NotifyError("A webhook needs the name of its signing secret.")
    delivery_id = uuid.uuid4()
    now = timezone.now()
    body = {
        "id": str(delivery_id),
        "event": str(event),
        "created_at": now.isoformat(),
        **payload,
    }
    return _queue(
        key=key or f"{event}:{delivery_id}",
        channel=Delivery.Channel.WEBHOOK,
        target=target,
        event=event,
        approval_id=approval_id,
        payload=body,
        url=url,
        allowed_hosts=hosts,
        secret_name=secret,
        delivery_id=delivery_id,
    )


def _queue(
    *,
    key: str,
    delivery_id: uuid.UUID | None = None,
    **fields: Any,
) -> Delivery:
    delivery, created = Delivery.objects.get_or_create(
        key=key, defaults={"id": delivery_id or uuid.uuid4(), **fields}
    )
    if created:
        enqueue_delivery(delivery.pk)
    return delivery


# -- targets ----------------------------------------------------------------------


def target_saved(*, target: NotifyTarget, by: Any, created: bool) -> None:
    """Audit a target's creation or change: where approvals are announced is
    security state (a webhook receives previews of what agents want to do)."""
    audit_append(
        kind=AuditKind.NOTIFY_TARGET_CHANGED,
        actor=by,
        object_type="notify_target",
        object_id=target.pk,
        data={
            "created": created,
            "name": target.name,
            "kind": target.kind,
            "enabled": target.enabled,
            "for_all": target.for_all,
            "events": list(target.events or []),
            "channel": target.slack_channel or None,
            "url": target.url or None,
            "allowed_hosts": list(target.allowed_hosts or []),
            "secret": target.secret_name or None,
        },
    )


def target_deleted(*, target: NotifyTarget, by: Any) -> None:
    """Delete ``target``, audited; its deliveries stay in the log (and are
    still sent: each carries its own URL and secret name)."""
    with transaction.atomic():
        audit_append(
            kind=AuditKind.NOTIFY_TARGET_CHANGED,
            actor=by,
            object_type="notify_target",
            object_id=target.pk,
            data={"deleted": True, "name": target.name, "kind": target.kind},
        )
        target.delete()


def target_secret_generate(*, target: NotifyTarget, by: Any) -> str:
    """A new random signing secret for ``target``, stored encrypted under its
    ``secret_name`` (``NOTIFY_<id>`` when blank); returned to be shown once."""
    value = secrets.token_urlsafe(32)
    name = target.secret_name or f"NOTIFY_{target.pk}"
    with transaction.atomic():
        secret_set(name=name, value=value)
        if target.secret_name != name:
            target.secret_name = name
            target.save(update_fields=["secret_name"])
        audit_append(
            kind=AuditKind.NOTIFY_SECRET_GENERATED,
            actor=by,
            object_type="notify_target",
            object_id=target.pk,
            data={"secret": name},
        )
    return value


def delivery_retry(*, delivery: Delivery, by: Any) -> None:
    """Send a failed (or waiting) delivery again now, with a fresh budget of
    attempts (the admin's action)."""
    Delivery.objects.filter(
        pk=delivery.pk,
        status__in=(Delivery.Status.FAILED, Delivery.Status.PENDING),
    ).update(status=Delivery.Status.PENDING, attempts=0, next_attempt_at=timezone.now())
    audit_append(
        kind=AuditKind.NOTIFY_DELIVERY_RETRIED,
        actor=by,
        object_type="delivery",
        object_id=delivery.pk,
        data={"event": delivery.event},
    )
    enqueue_delivery(delivery.pk)
