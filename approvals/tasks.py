from __future__ import annotations

from celery import shared_task

from approvals.services import approvals_escalate, approvals_expire


@shared_task(name="approvals.expire")
def expire() -> int:
    return approvals_expire()


@shared_task(name="approvals.escalate")
def escalate() -> int:
    """Add the escalation approvers of requests unanswered past their route's
    time (``approvals.routing``)."""
    return approvals_escalate()
