"""The end of a task, and the chat lines of a task.

:func:`_finish_task` sets the final fields of a stopped task, adds the
assistant's reply (:func:`message_add`, which also records the user's goal when a
task starts), audits it and sends ``runs.ports.task_finished`` (and
``task_outcome`` when the task names a webhook URL). Both the lifecycle
services (:mod:`runs.services`, a cancel) and the journal (:mod:`runs.journal`, a
run's end) finish tasks through it.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_task
from engine.spec import AgentSnapshot, StopReason
from runs import counters, ports
from runs.models import Conversation, Message, Task
from runs.steps import _redact_text


def message_add(
    *, task: Task, role: Message.Role, content: str, at: datetime
) -> Message:
    """Add a chat line of ``task`` to its conversation: its goal or its reply."""
    return Message.objects.create(
        conversation_id=task.conversation_id,
        role=role,
        content=content,
        task=task,
        created_at=at,
    )


def _finish_task(
    task: Task, reason: StopReason, *, answer: str | None, message: str | None
) -> None:
    """Set final fields on a locked task and add the assistant's reply."""
    now = timezone.now()
    # Error messages can quote what a server echoed back (keys included).
    answer = _redact_text(answer)
    message = _redact_text(message)
    task.status = reason.task_status.value
    task.stop_reason = reason.value
    task.final_answer = answer
    task.error_message = message or ""
    task.finished_at = now
    task.lease_owner = ""
    task.lease_expires_at = None
    task.rev += 1
    text = answer if answer is not None else (message or _reason_text(reason))
    message_add(task=task, role=Message.Role.ASSISTANT, content=text, at=now)
    Conversation.objects.filter(pk=task.conversation_id).update(updated_at=now)
    audit_task(
        AuditKind.TASK_FINISHED,
        task_id=task.pk,
        actor="system",
        data={"status": task.status, "stop_reason": task.stop_reason},
    )
    if reason is StopReason.COST_BUDGET:
        audit_task(
            AuditKind.BUDGET_RUN_EXCEEDED,
            task_id=task.pk,
            actor="system",
            data={"cost_usd": task.cost_usd, "max_cost_usd": _max_cost_of(task)},
        )
    counters.count_task_finished_on_commit(task)
    ports.task_finished.send(sender=Task, task=task)
    if task.webhook_url:
        ports.task_outcome.send(sender=Task, task=task, parked=False)


def _max_cost_of(task: Task) -> float | None:
    """The cost budget the run had (read only when it stopped the run)."""
    recorded = Task.objects.filter(pk=task.pk).values_list("agent_snapshot", flat=True)
    snapshot = AgentSnapshot.from_json(recorded.first())
    return snapshot.limits.max_cost_usd if snapshot.limits is not None else None


def _reason_text(reason: StopReason) -> str:
    return {
        StopReason.CANCELLED: "Cancelled.",
    }.get(reason, f"Stopped ({reason.value}).")
