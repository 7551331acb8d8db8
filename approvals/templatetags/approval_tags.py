"""Template helpers for approval cards and the decisions steps show."""

from __future__ import annotations

from django import template

from approvals.models import ApprovalDecision, ApprovalRequest
from runs.step_html import decided_as as step_decided_as

register = template.Library()


@register.filter
def approvals_so_far(approval: ApprovalRequest) -> int:
    """Votes for the arguments as they stand (an edit restarts the count)."""
    return sum(
        1 for v in approval.votes.all() if v.arguments_hash == approval.arguments_hash
    )


@register.filter
def approvers(approval: ApprovalRequest) -> str:
    """Who approved these arguments, in order, or who decided otherwise."""
    names = [
        v.user.get_username()
        for v in approval.votes.all()
        if v.arguments_hash == approval.arguments_hash
    ]
    if names and approval.status in (
        ApprovalRequest.Status.PENDING,
        ApprovalRequest.Status.APPROVED,
    ):
        return ", ".join(names)
    return approval.decided_by.get_username() if approval.decided_by else ""


@register.filter
def decided_as(decision: str) -> str:
    """A step's recorded decision as the step shows it: ``approved``, ``rejected``
    or ``marked done`` (:func:`runs.step_html.decided_as`)."""
    return step_decided_as(decision)


@register.filter
def outcome(approval: ApprovalRequest) -> str:
    """What became of a request as the queue and the history show it: the
    decision taken (``marked done`` and ``retried`` are both ``approved``), or the
    status when nobody decided (``pending``, ``expired``, ``cancelled``)."""
    if approval.decision in ApprovalDecision.values:
        return str(ApprovalDecision(approval.decision).label)
    return str(approval.status)
