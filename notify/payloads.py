"""What an announcement says about a request: the event it is, and its JSON."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from approvals.models import ApprovalRequest
from approvals.selectors import approvers_for
from infra.runtime import redactor
from notify.models import NotifyEvent

#: The event a request's current state announces; a vote (still pending, but
#: no longer new) announces nothing.
EVENT_OF_STATUS = {
    ApprovalRequest.Status.APPROVED: NotifyEvent.APPROVAL_DECIDED,
    ApprovalRequest.Status.REJECTED: NotifyEvent.APPROVAL_DECIDED,
    ApprovalRequest.Status.EXPIRED: NotifyEvent.APPROVAL_EXPIRED,
    ApprovalRequest.Status.CANCELLED: NotifyEvent.APPROVAL_CANCELLED,
}


def event_of(approval: ApprovalRequest) -> NotifyEvent | None:
    """The event ``approval``'s change announces, or None (a vote)."""
    if approval.status == ApprovalRequest.Status.PENDING:
        return NotifyEvent.APPROVAL_REQUESTED if approval.version == 0 else None
    return EVENT_OF_STATUS.get(ApprovalRequest.Status(approval.status))


def queue_url(approval: ApprovalRequest) -> str:
    """The approval queue, at this request's card (where it can be edited)."""
    base = settings.REACH_PUBLIC_URL.rstrip("/")
    return f"{base}/approvals/#approval-{approval.pk}"


def outcome_payload(approval: ApprovalRequest) -> dict[str, Any] | None:
    """How a request ended (None while pending)."""
    if approval.status == ApprovalRequest.Status.PENDING:
        return None
    return {
        "status": approval.status,
        "decision": approval.decision or None,
        "decided_by": (
            approval.decided_by.get_username() if approval.decided_by else None
        ),
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "reason": approval.reason or None,
    }


def approval_payload(approval: ApprovalRequest) -> dict[str, Any]:
    """The request as a webhook sends it (no arguments: the preview says what
    would run; the queue shows the rest to those who may see it)."""
    return {
        "id": str(approval.pk),
        "kind": approval.kind,
        "task": str(approval.task_id),
        "tool": approval.tool,
        "preview": approval.preview,
        "risk": approval.risk,
        "reasons": list(approval.reasons or []),
        "tainted_by": list(approval.tainted_by or []),
        "approvals_required": approval.approvals_required,
        "requested_by": approval.requested_by.get_username(),
        "requested_at": approval.requested_at.isoformat(),
        "expires_at": approval.expires_at.isoformat(),
        "approvers": [user.get_username() for user in approvers_for(approval)],
        # The approval route that chose them (approvals.routing); null: none.
        "route": approval.route.name if approval.route_id else None,
        "url": queue_url(approval),
        "status": approval.status,
    }


def event_payload(approval: ApprovalRequest) -> dict[str, Any]:
    """What one announcement says (beside its id and event): the request and,
    once it ended, its outcome; redacted."""
    body = {
        "approval": approval_payload(approval),
        "outcome": outcome_payload(approval),
    }
    return dict(redactor().data(body))
