"""Approval events: a poke after commit; the queue's consumer renders the card."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import Signal
from django.template.loader import render_to_string

from approvals.payloads import approval_payload
from approvals.selectors import approval_shown, card_refusal
from infra.push import APPROVALS_GROUP, push
from infra.runtime import redactor

#: Sent with ``approval_id`` whenever a request is created, voted on, decided,
#: expired or cancelled, inside the caller's transaction (after the change): a
#: receiver writes its rows in that transaction and defers anything slow to
#: ``on_commit``. Approvals imports no listener; one connects in its own app's
#: ``ready`` (``notify``: Slack messages and webhooks, notify/apps.py).
approval_changed = Signal()


def approval_changed_on_commit(approval_id: Any) -> None:
    """After commit, tell the approval queues that this request changed (and
    the listeners of :data:`approval_changed`, now, in the transaction)."""
    message = {"type": "reach.approval", "id": str(approval_id)}
    transaction.on_commit(lambda: push(APPROVALS_GROUP, message))
    approval_changed.send(sender=None, approval_id=approval_id)


def load_approval_event(
    approval_id: Any, *, decide_refusal: Any = None, reach: Any = None
) -> dict[str, Any] | None:
    """The approval event, with its rendered card (the consumer's side); a
    listener who may not decide (``decide_refusal``) gets its buttons disabled,
    with the reason. With ``reach`` (``approvals.routing.Reach``, the
    listener's): None for a request they do not see, and the buttons disabled
    on one they read but may not decide."""
    approval = approval_shown(approval_id)
    if approval is None:
        return None
    if reach is not None:
        if not reach.sees(approval):
            return None
        decide_refusal = card_refusal(reach, approval, decide_refusal)
    return {
        "type": "approval",
        "approval": redactor().data(approval_payload(approval)),
        "html": render_to_string(
            "approvals/_card.html",
            {"approval": approval, "decide_refusal": decide_refusal},
        ),
    }
