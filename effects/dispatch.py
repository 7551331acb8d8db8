"""The outbox dispatcher: it sends the mail the ledger queued.

Each pending row is claimed before it is sent, so two dispatchers never send it
twice; a send left claimed by a crashed dispatcher goes back to pending
(:func:`outbox_reset_stuck`). The Celery tasks (:mod:`effects.tasks`) run it after
a mail's commit and on the beat.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from effects.models import MailReport, Outbox
from infra import mail

log = logging.getLogger(__name__)


def outbox_dispatch(*, key: str | None = None, limit: int = 50) -> str | None:
    """Send pending mail (one key, or a batch); return the status of ``key``:
    a :class:`MailReport` when this call tried to send it, else its row's."""
    rows = Outbox.objects.filter(status=Outbox.Status.PENDING)
    if key is not None:
        rows = rows.filter(idempotency_key=key)
    status: str | None = None
    for row in list(rows.order_by("created_at")[:limit]):
        # Claim the row so two dispatchers never send it twice; the claim time
        # tells the reaper of stuck sends how long this send has been in flight.
        claimed = Outbox.objects.filter(pk=row.pk, status=Outbox.Status.PENDING).update(
            status=Outbox.Status.SENDING,
            attempts=row.attempts + 1,
            claimed_at=timezone.now(),
        )
        if not claimed:
            continue
        try:
            mail.send(
                to=row.to,
                subject=row.subject,
                body=row.body,
                message_id=row.message_id,
            )
        except Exception as exc:  # noqa: BLE001 - retried by the beat dispatcher
            log.warning("sending %s failed: %s", row.message_id, exc)
            Outbox.objects.filter(pk=row.pk).update(
                status=Outbox.Status.PENDING, last_error=str(exc)[:500]
            )
            status = MailReport.QUEUED
            continue
        Outbox.objects.filter(pk=row.pk).update(
            status=Outbox.Status.SENT, sent_at=timezone.now()
        )
        status = MailReport.SENT
    if key is not None and status is None:
        row = Outbox.objects.filter(idempotency_key=key).first()
        status = row.status if row else None
    return status


def outbox_reset_stuck(older_than_s: int = 600) -> int:
    """Mail left 'sending' by a crashed dispatcher goes back to pending.

    A send is stuck when it was *claimed* more than ``older_than_s`` ago (far
    beyond ``EMAIL_TIMEOUT``), however long the mail waited before its claim:
    judged by its age, a mail that waited and was just claimed would go back to
    pending while its first send is in flight, and be sent twice. Its Message-ID
    is derived from the idempotency key, so a receiver that got the first copy
    of a really stuck send recognises the second.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    stuck = Q(claimed_at__lt=cutoff) | Q(
        # Claimed before claims were recorded: its age is all there is to go by.
        claimed_at__isnull=True,
        created_at__lt=cutoff,
    )
    return Outbox.objects.filter(stuck, status=Outbox.Status.SENDING).update(
        status=Outbox.Status.PENDING
    )
