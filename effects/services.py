"""The effect ledger: every write happens once per idempotency key.

A write and its ledger row commit in one transaction; a second execution with
the same key returns the stored result and does nothing. Mail cannot join a
database transaction, so ``send_email`` writes an outbox row in the ledger's
transaction (:func:`queue_email`, the outbox's one writer, which also fills
``infra.mail.outbox``) and the dispatcher (:mod:`effects.dispatch`) sends it with a
``Message-ID`` derived from the key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction

from effects import tasks as effect_tasks
from effects.models import Outbox, ToolExecution
from engine.canonical import canonical_hash
from engine.execution import ToolError
from engine.spec import CallContext
from infra.mail import message_id_for

log = logging.getLogger(__name__)


def effect_once(
    *,
    context: CallContext,
    arguments: dict[str, Any],
    effect: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """Run ``effect`` and record it under the call's key, unless already done."""
    key = context.idempotency_key
    if not key:
        raise ToolError("This write has no idempotency key; refused.")
    args_hash = canonical_hash(arguments)
    try:
        with transaction.atomic():
            done = ToolExecution.objects.filter(idempotency_key=key).first()
            if done is not None:
                return _replay(done, args_hash)
            result = effect()
            ToolExecution.objects.create(
                idempotency_key=key,
                tool=context.tool.name,
                task_id=context.task_id or None,
                arguments_hash=args_hash,
                status=ToolExecution.Status.DONE,
                result=result,
            )
            return result
    except IntegrityError:
        # A concurrent execution with the same key won; return what it stored.
        done = ToolExecution.objects.get(idempotency_key=key)
        return _replay(done, args_hash)


def _replay(done: ToolExecution, args_hash: str) -> dict[str, Any]:
    if done.arguments_hash != args_hash:
        raise ToolError(
            "This idempotency key was already used with other arguments; refused."
        )
    return {**(done.result or {}), "deduplicated": True}


def queue_email(
    *,
    key: str,
    to: str,
    subject: str,
    body: str,
    dispatch_after_commit: bool = False,
) -> Outbox:
    """Queue one mail in the outbox, inside the caller's transaction: the outbox's
    one writer (``send_email``'s effect, and ``infra.mail.outbox`` for the others).

    Nothing is sent for a transaction that rolls back, and the caller never waits
    on a mail server. With ``dispatch_after_commit`` the send is handed to the
    dispatcher once the transaction commits (approvals' notices: the caller is a
    worker holding a task's lock); a mail whose enqueue is lost is sent by the beat
    dispatcher. Without it the caller dispatches the mail itself (``send_email``,
    right after its ledger commits), or the beat does. Queuing one key twice is a
    no-op: the second call returns the first's row.
    """
    row, created = Outbox.objects.get_or_create(
        idempotency_key=key,
        defaults={
            "message_id": message_id_for(key),
            "to": to,
            "subject": subject,
            "body": body,
        },
    )
    if created and dispatch_after_commit:
        transaction.on_commit(lambda: _enqueue_dispatch(key))
    return row


def _enqueue_dispatch(key: str) -> None:
    try:
        effect_tasks.dispatch_mail.delay(key)
    except Exception:  # noqa: BLE001 - the beat dispatcher sends it within 30 s
        log.warning("enqueue of mail %s failed; the dispatcher will send it", key)
