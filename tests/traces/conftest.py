"""Helpers for the trace tests: recorded runs made in-process on the real stack.

Runs are driven the way the ``advance`` Celery task drives them
(``runs.task_start`` + ``runs.task_advance``), through the real ``openai`` SDK
against the scripted model server on loopback, on the real database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from agents.models import Task
from agents.services import runs
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tests.integration.conftest import stack  # noqa: F401 - a fixture, re-exported
from tests.support.scripted_model import Handler, ScriptedModel

QUESTION = "项目笔记里哪个方案提到 Redis？找到其中的预算表达式并计算总和。"
TICKET = {"title": "Cache", "body": "Move the hot queries to Redis."}
EMAIL = {"to": "ops@example.com", "subject": "report", "body": "The weekly report."}


@pytest.fixture
def model(use_model: Any) -> Iterator[Callable[[Handler], ScriptedModel]]:
    """``model(handler)`` starts a scripted model server the product talks to."""
    servers: list[ScriptedModel] = []

    def start(handler: Handler) -> ScriptedModel:
        server = ScriptedModel(handler).start()
        servers.append(server)
        use_model(server)
        return server

    yield start
    for server in servers:
        server.stop()


def ask(user: Any, agent: Any, content: str, conversation: Any = None) -> Task:
    """Start a task and drive it in-process until it parks or finishes."""
    conversation = conversation or runs.conversation_create(owner=user, agent=agent)
    task = runs.task_start(conversation=conversation, content=content)
    return advance(task)


def advance(task: Task) -> Task:
    """Run what the ``advance`` Celery task would run; return the fresh task."""
    runs.task_advance(task_id=task.pk)
    task.refresh_from_db()
    return task


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
