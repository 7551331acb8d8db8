"""Helpers for the trace tests: recorded runs made in-process on the real stack.

Runs are driven the way the ``advance`` Celery task drives them
(``runs.task_start`` + ``runs.task_advance``), through the real ``openai`` SDK
against the scripted model server on loopback, on the real database.
"""

from __future__ import annotations

from typing import Any

from django.test import Client

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from runs.models import Task
from tests.integration.conftest import stack  # noqa: F401 - a fixture, re-exported
from tests.support.runs import advance

QUESTION = "项目笔记里哪个方案提到 Redis？找到其中的预算表达式并计算总和。"
TICKET = {"title": "Cache", "body": "Move the hot queries to Redis."}
EMAIL = {"to": "ops@example.com", "subject": "report", "body": "The weekly report."}


def decide(
    task: Task,
    user: Any,
    decision: str,
    *,
    arguments: dict[str, Any] | None = None,
    reason: str = "",
) -> Task:
    """Decide the task's (first) pending approval, then let the run go on."""
    approval = (
        ApprovalRequest.objects.filter(task=task, status="pending")
        .order_by("step__seq")
        .first()
    )
    assert approval is not None, "nothing is pending"
    approval_decide(
        approval=approval,
        user=user,
        decision=decision,
        arguments=arguments,
        reason=reason,
    )
    return advance(task)


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client
