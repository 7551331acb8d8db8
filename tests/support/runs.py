"""Running tasks in-process in tests, as the ``advance`` Celery task would."""

from __future__ import annotations

from typing import Any

from runs import services as runs
from runs.models import Task


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
