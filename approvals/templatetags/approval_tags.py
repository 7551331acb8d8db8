"""Template helpers for approval cards."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

from approvals.models import ApprovalRequest

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
    if names and approval.status in ("pending", "approved"):
        return ", ".join(names)
    return approval.decided_by.get_username() if approval.decided_by else ""


@register.filter
def ago(moment: datetime | None) -> str:
    """``just now``, ``40 s ago``, ``12 min ago``, ``3 h 5 min ago``, ``2 days ago``."""
    if moment is None:
        return ""
    seconds = max(0, int((timezone.now() - moment).total_seconds()))
    return f"{_span(seconds)} ago" if seconds >= 5 else "just now"


@register.filter
def left(moment: datetime | None) -> str:
    """Time until ``moment`` (``12 min``); ``0 s`` once it has passed."""
    if moment is None:
        return ""
    return _span(max(0, int((moment - timezone.now()).total_seconds())))


def _span(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} days"
