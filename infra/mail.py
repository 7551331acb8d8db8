"""Mail: the outbox any app queues a mail in, and how one is sent.

A mail cannot join a database transaction, so nothing sends one directly: it is
queued in the outbox (a row of ``effects``' ``Outbox``, inside the caller's
transaction) and the dispatcher (``effects.dispatch``) sends it, with a
``Message-ID`` derived from its key, so a receiver recognises a second copy.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from django.conf import settings
from django.core.mail import EmailMessage

from infra.slots import Slot


class QueueMail(Protocol):
    def __call__(
        self,
        *,
        key: str,
        to: str,
        subject: str,
        body: str,
        dispatch_after_commit: bool = False,
    ) -> object:
        """Queue one mail inside the caller's transaction, once per ``key``; with
        ``dispatch_after_commit`` the dispatcher sends it once that transaction
        commits (else the caller dispatches it, or the beat does)."""


#: The outbox. Filled by ``effects`` (``EffectsConfig.ready``, effects/apps.py) with
#: ``effects.services.queue_email``; required. Approvals mails approvers through
#: it (approvals and effects are siblings that may not import each other).
outbox = Slot[QueueMail]("mail outbox", filled_by="effects")


def message_id_for(key: str) -> str:
    """The ``Message-ID`` of the mail queued under ``key`` (the same for every copy)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:40]
    return f"<{digest}@agent-reach>"


def send(*, to: str, subject: str, body: str, message_id: str) -> None:
    """Send one mail now, from ``DEFAULT_FROM_EMAIL``; raises what the backend
    raises (the dispatcher retries)."""
    message = EmailMessage(
        subject=subject,
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[to],
        headers={"Message-ID": message_id},
    )
    message.send(fail_silently=False)
