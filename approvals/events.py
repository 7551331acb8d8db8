"""Approval events: a poke after commit; the queue's consumer renders the card."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.template.loader import render_to_string

from approvals.payloads import approval_payload
from approvals.selectors import approval_shown
from infra.push import APPROVALS_GROUP, push
from infra.runtime import redactor


def approval_changed_on_commit(approval_id: Any) -> None:
    """After commit, tell the approval queues that this request changed."""
    message = {"type": "reach.approval", "id": str(approval_id)}
    transaction.on_commit(lambda: push(APPROVALS_GROUP, message))


def load_approval_event(
    approval_id: Any, *, decide_refusal: Any = None
) -> dict[str, Any] | None:
    """The approval event, with its rendered card (the consumer's side); a
    listener who may not decide (``decide_refusal``) gets its buttons disabled,
    with the reason."""
    approval = approval_shown(approval_id)
    if approval is None:
        return None
    return {
        "type": "approval",
        "approval": redactor().data(approval_payload(approval)),
        "html": render_to_string(
            "approvals/_card.html",
            {"approval": approval, "decide_refusal": decide_refusal},
        ),
    }
