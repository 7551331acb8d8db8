"""Live updates: events sent to websocket groups after the transaction commits."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.template.loader import render_to_string

from engine.redaction import Redactor
from infra.push import push, task_group
from infra.runtime import redactor
from runs.models import Step, Task
from runs.payloads import step_payload, task_payload


def _redactor() -> Redactor:
    return redactor()


def step_event(step: Any) -> dict[str, Any]:
    payload = _redactor().data(step_payload(step))
    return {
        "type": "step",
        "task": str(step.task_id),
        "step": payload,
        "html": render_step_html(step),
    }


def render_step_html(step: Any) -> str:
    return render_to_string("runs/_step.html", {"step": step})


def task_event(task: Any) -> dict[str, Any]:
    return {"type": "task", "task": _redactor().data(task_payload(task))}


def task_changed_on_commit(task_id: Any) -> None:
    """After commit, poke the task's watchers: something of it changed.

    The poke carries nothing: each websocket consumer sends its client every step
    changed since what it last sent (by ``rev``), then the task, from the
    database. So a run pays nothing for events nobody watches, and a watcher can
    neither miss a change nor see the task finish before its last steps.
    """
    group = task_group(task_id)
    transaction.on_commit(lambda: push(group, {"type": "reach.changed"}))


#: The columns task_payload reads (runs/payloads.py).
TASK_EVENT_FIELDS = (
    "id",
    "conversation_id",
    "agent__name",
    "owner__username",
    "model",
    "status",
    "stop_reason",
    "final_answer",
    "error_message",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "step_count",
    "parent_id",
    "parent_seq",
    "origin",
    "goal",
    "tainted_by",
    "rev",
    "created_at",
    "started_at",
    "finished_at",
)


def changes_since(
    task_id: Any, after: int
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, int]:
    """Step events with ``rev > after`` in rev order, the task event, and the rev
    the caller is now up to (the consumer's side).

    The task is read first: every step change that committed before it has a
    rev no higher than the task's, and later ones get higher revs, so moving the
    cursor to the task's rev never skips a change.
    """
    task = load_task_event(task_id)
    steps = list(Step.objects.filter(task_id=task_id, rev__gt=after).order_by("rev"))
    cursor = max([after, *(s.rev for s in steps)])
    if task is not None:
        cursor = max(cursor, int(task["task"]["rev"]))
    return [step_event(step) for step in steps], task, cursor


def load_task_event(task_id: Any) -> dict[str, Any] | None:
    """The task event for ``task_id`` (the consumer's side)."""
    task = (
        Task.objects.select_related("agent", "owner")
        .only(*TASK_EVENT_FIELDS)
        .filter(pk=task_id)
        .first()
    )
    return task_event(task) if task is not None else None
