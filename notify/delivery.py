"""Sending what the outbox holds: one attempt of a delivery, and the sweep.

A delivery is claimed with a guarded UPDATE before it is sent (two senders
never send it at once), every try is logged (:class:`DeliveryAttempt`), and a
failure is tried again after an exponential backoff until
``REACH_NOTIFY_MAX_ATTEMPTS``; then it is ``failed`` and audited. A refusal
that no retry can change (the SSRF guard's) fails at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.selectors import approvers_for
from audit.models import AuditKind
from audit.services import audit_append
from notify import slack, webhooks
from notify.models import (
    Delivery,
    DeliveryAttempt,
    NotifyEvent,
    NotifyTarget,
    SlackMessage,
    SlackRequestSeen,
)
from registry.secrets import secret_value

log = logging.getLogger(__name__)

#: A delivery claimed longer ago than this is taken to be stuck (its sender
#: died); far beyond the send timeouts.
STUCK_AFTER = timedelta(minutes=5)
#: Signed Slack requests remembered (to refuse a replay) this long: beyond the
#: five minutes within which a timestamp is accepted at all.
SEEN_KEPT = timedelta(minutes=15)


@dataclass(frozen=True)
class Outcome:
    """How one attempt went."""

    delivered: bool
    status_code: int | None = None
    error: str = ""
    #: No retry can change it (a URL the guard refuses).
    final: bool = False


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failed try: doubling from
    ``REACH_NOTIFY_BACKOFF_S``, at most ``REACH_NOTIFY_BACKOFF_MAX_S``."""
    base = float(settings.REACH_NOTIFY_BACKOFF_S)
    ceiling = float(settings.REACH_NOTIFY_BACKOFF_MAX_S)
    return timedelta(seconds=min(base * 2 ** max(attempts - 1, 0), ceiling))


def delivery_attempt(*, delivery_id: Any, now: datetime | None = None) -> str | None:
    """Try ``delivery_id`` once if it is due; return its status afterwards.

    Safe to run twice and from several processes: only the caller whose
    guarded UPDATE claims the row sends it.
    """
    now = now or timezone.now()
    row = Delivery.objects.filter(pk=delivery_id).select_related("target").first()
    if row is None:
        return None
    if row.status != Delivery.Status.PENDING or row.next_attempt_at > now:
        return row.status
    claimed = Delivery.objects.filter(
        pk=row.pk, status=Delivery.Status.PENDING, attempts=row.attempts
    ).update(status=Delivery.Status.SENDING, attempts=F("attempts") + 1, claimed_at=now)
    if not claimed:
        return Delivery.objects.values_list("status", flat=True).get(pk=row.pk)
    number = row.attempts + 1
    started = time.monotonic()
    try:
        outcome = _send(row)
    except Exception as exc:  # noqa: BLE001 - logged, then retried
        log.warning("delivery %s failed", row.pk, exc_info=True)
        outcome = Outcome(False, error=f"{exc.__class__.__name__}: {exc}")
    return _record(row, number, outcome, started)


def _record(row: Delivery, number: int, outcome: Outcome, started: float) -> str:
    finished = timezone.now()
    DeliveryAttempt.objects.create(
        delivery=row,
        number=number,
        at=finished,
        status_code=outcome.status_code,
        error=outcome.error[:2000],
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    changes: dict[str, Any] = {
        "last_status_code": outcome.status_code,
        "last_error": outcome.error[:2000],
    }
    if outcome.delivered:
        status = Delivery.Status.DELIVERED
        changes["delivered_at"] = finished
    elif outcome.final or number >= int(settings.REACH_NOTIFY_MAX_ATTEMPTS):
        status = Delivery.Status.FAILED
    else:
        status = Delivery.Status.PENDING
        changes["next_attempt_at"] = finished + backoff(number)
    Delivery.objects.filter(pk=row.pk, status=Delivery.Status.SENDING).update(
        status=status, **changes
    )
    if status == Delivery.Status.FAILED:
        audit_append(
            kind=AuditKind.NOTIFY_DELIVERY_FAILED,
            actor="system",
            object_type="delivery",
            object_id=row.pk,
            data={
                "event": row.event,
                "channel": row.channel,
                "target": row.target.name if row.target else None,
                "attempts": number,
                "status_code": outcome.status_code,
                "error": outcome.error[:300],
            },
        )
    return status


def _send(row: Delivery) -> Outcome:
    if row.channel == Delivery.Channel.WEBHOOK:
        return _send_webhook(row)
    return _send_slack(row)


def _send_webhook(row: Delivery) -> Outcome:
    secret = secret_value(row.secret_name) if row.secret_name else None
    if not secret:
        return Outcome(
            False,
            error=f"The signing secret {row.secret_name or '(none)'} is not "
            "in the secret store.",
        )
    body = webhooks.encode_body(row.payload)
    headers = {
        webhooks.SIGNATURE_HEADER: webhooks.signature(
            secret, body, timestamp=int(time.time())
        ),
        "X-Reach-Event": row.event,
        "X-Reach-Delivery": str(row.pk),
    }
    try:
        sent = webhooks.post(
            url=row.url,
            allowed_hosts=list(row.allowed_hosts or []),
            body=body,
            headers=headers,
        )
    except webhooks.WebhookRefused as exc:
        return Outcome(False, error=str(exc), final=True)
    return Outcome(sent.ok, status_code=sent.status_code, error=sent.error)


def _send_slack(row: Delivery) -> Outcome:
    approval = (
        ApprovalRequest.objects.select_related("requested_by", "decided_by")
        .filter(pk=row.approval_id)
        .first()
    )
    if approval is None:
        return Outcome(True, error="The request no longer exists: nothing to say.")
    try:
        web = slack.client()
        if row.event == NotifyEvent.APPROVAL_REQUESTED:
            return _post_request(web, row, approval)
        return _update_messages(web, row, approval)
    except (slack.SlackNotConfigured, slack.SlackCallFailed) as exc:
        return Outcome(False, error=str(exc))


def _post_request(web: Any, row: Delivery, approval: ApprovalRequest) -> Outcome:
    kind = row.payload.get("target_kind")
    if kind == NotifyTarget.Kind.SLACK_CHANNEL:
        channel = str(row.payload.get("channel") or "")
        if not SlackMessage.objects.filter(
            approval_id=row.approval_id, channel=channel
        ).exists():
            posted = slack.post_to_channel(web, approval, channel=channel)
            _remember(row, posted)
        return Outcome(True)
    missing = []
    for user in approvers_for(approval).exclude(email=""):
        found = slack.dm_channel(web, email=user.email)
        if found is None:
            missing.append(user.email)
            continue
        slack_user, channel = found
        if SlackMessage.objects.filter(
            approval_id=row.approval_id, channel=channel
        ).exists():
            continue  # posted by an earlier try of this delivery
        posted = slack.post_to_channel(web, approval, channel=channel)
        _remember(row, slack.Posted(posted.channel, posted.ts, slack_user))
    note = f"Not in this Slack workspace: {', '.join(missing)}." if missing else ""
    return Outcome(True, error=note)


def _remember(row: Delivery, posted: slack.Posted) -> None:
    SlackMessage.objects.get_or_create(
        approval_id=row.approval_id,
        channel=posted.channel,
        defaults={
            "target": row.target,
            "ts": posted.ts,
            "slack_user": posted.slack_user,
        },
    )


def _update_messages(web: Any, row: Delivery, approval: ApprovalRequest) -> Outcome:
    """Show the outcome on every message posted about the request."""
    messages = list(
        SlackMessage.objects.filter(approval_id=row.approval_id, target=row.target)
    )
    if not messages:
        announcing = Delivery.objects.filter(
            approval_id=row.approval_id,
            target=row.target,
            channel=Delivery.Channel.SLACK,
            event=NotifyEvent.APPROVAL_REQUESTED,
            status__in=(Delivery.Status.PENDING, Delivery.Status.SENDING),
        ).exists()
        if announcing:
            return Outcome(False, error="The request's message is not posted yet.")
        return Outcome(True, error="No message was posted about this request.")
    for posted in messages:
        slack.update(web, approval, channel=posted.channel, ts=posted.ts)
    return Outcome(True)


def deliveries_sweep(*, now: datetime | None = None, limit: int = 100) -> int:
    """What the beat runs: stuck sends back to pending, every due delivery
    tried once, old replay keys forgotten. Returns how many it tried."""
    now = now or timezone.now()
    Delivery.objects.filter(
        status=Delivery.Status.SENDING, claimed_at__lt=now - STUCK_AFTER
    ).update(status=Delivery.Status.PENDING)
    SlackRequestSeen.objects.filter(seen_at__lt=now - SEEN_KEPT).delete()
    due = list(
        Delivery.objects.filter(
            status=Delivery.Status.PENDING, next_attempt_at__lte=now
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    for delivery_id in due:
        delivery_attempt(delivery_id=delivery_id, now=now)
    return len(due)
