"""Helpers for the approval tests: a scripted model, runs driven in-process."""

from __future__ import annotations

from typing import Any

from approvals.models import ApprovalRequest
from runs.models import Task

EMAIL = {"to": "ops@example.com", "subject": "report", "body": "The weekly report."}
TICKET = {"title": "Cache", "body": "Move the hot queries to Redis."}


def pending(task: Task) -> list[ApprovalRequest]:
    return list(
        ApprovalRequest.objects.filter(
            task=task, status=ApprovalRequest.Status.PENDING
        ).order_by("step__seq")
    )


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]
