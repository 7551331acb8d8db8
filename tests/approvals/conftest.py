"""Helpers for the approval tests: a scripted model, runs driven in-process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agents.models import Task
from agents.services import runs
from approvals.models import ApprovalRequest
from tests.support.scripted_model import Handler, ScriptedModel

EMAIL = {"to": "ops@example.com", "subject": "report", "body": "The weekly report."}
TICKET = {"title": "Cache", "body": "Move the hot queries to Redis."}


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


def pending(task: Task) -> list[ApprovalRequest]:
    return list(
        ApprovalRequest.objects.filter(
            task=task, status=ApprovalRequest.Status.PENDING
        ).order_by("step__seq")
    )


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]
