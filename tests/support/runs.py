"""Runs in-process, as the ``advance`` Celery task would drive them.

Start, advance and ask (start then advance); a claimed journal for writing steps
by hand (and model and note steps to write, a run of notes written so); the
pending approvals of a task and deciding them; users in a group.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from engine.spec import StepKind, StepRecord, StepStatus
from runs import journal as run_journal
from runs import leases as run_leases
from runs import services as runs
from runs import tasks as run_tasks
from runs.models import Step, Task
from tests.support.cast import PASSWORD


def start(user: Any, agent: Any, content: str = "hi", conversation: Any = None) -> Task:
    """Record ``content`` as a new task (queued, not advanced)."""
    conversation = conversation or runs.conversation_create(owner=user, agent=agent)
    return runs.task_start(conversation=conversation, content=content)


def ask(user: Any, agent: Any, content: str, conversation: Any = None) -> Task:
    """Start a task and drive it in-process until it parks or finishes."""
    return advance(start(user, agent, content, conversation))


def advance(task: Task) -> Task:
    """Run what the ``advance`` Celery task would run; return the fresh task."""
    run_tasks.task_advance(task_id=task.pk)
    task.refresh_from_db()
    return task


def claimed(
    user: Any, agent: Any, content: str = "hi", owner: str = "w"
) -> run_journal.DjangoJournal:
    """The journal of a new task claimed by worker ``owner``, to write steps to."""
    task = start(user, agent, content)
    epoch = run_leases.task_claim(task_id=task.pk, owner=owner)
    assert epoch is not None
    return run_journal.DjangoJournal(
        Task.objects.get(pk=task.pk), owner=owner, epoch=epoch
    )


def model_step(model: str, **fields: Any) -> StepRecord:
    """A succeeded model_call step at seq 1 that used 10 tokens (7 in, 3 out)."""
    return StepRecord(
        seq=1,
        kind=StepKind.MODEL_CALL,
        status=StepStatus.SUCCEEDED,
        model=model,
        usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        **fields,
    )


def note_steps(first: int, count: int) -> list[StepRecord]:
    """``count`` note steps from seq ``first`` on, saying ``note <seq - 1>``."""
    return [
        StepRecord(
            seq=seq,
            kind=StepKind.NOTE,
            status=StepStatus.SUCCEEDED,
            detail={"text": f"note {seq - 1}"},
        )
        for seq in range(first, first + count)
    ]


def with_notes(
    user: Any, agent: Any, count: int = 3, content: str = "hello"
) -> run_journal.DjangoJournal:
    """``claimed``, with ``count`` note steps written (seq 1 on): a live run."""
    journal = claimed(user, agent, content)
    journal.append(note_steps(1, count))
    return journal


def more_notes(journal: run_journal.DjangoJournal, count: int) -> None:
    """``count`` more note steps, after the task's last one, through ``journal``."""
    first = Step.objects.filter(task_id=journal.task_id).count() + 1
    journal.append(note_steps(first, count))


#: ``with_notes`` and ``more_notes`` for async tests (a socket's, a stream's).
with_notes_async = database_sync_to_async(with_notes)
more_notes_async = database_sync_to_async(more_notes)


class Waiting(NamedTuple):
    """A task parked on approvals: the task, its pending requests, the model."""

    task: Task
    approvals: list[ApprovalRequest]
    script: Any


class Exported(NamedTuple):
    """A run exported as a trace document, and the client that exported it."""

    task: Task
    client: Any
    document: dict[str, Any]


def pending(task: Task) -> list[ApprovalRequest]:
    """The task's pending approval requests, in step order."""
    return list(
        ApprovalRequest.objects.filter(
            task=task, status=ApprovalRequest.Status.PENDING
        ).order_by("step__seq")
    )


def decide(
    task: Task,
    user: Any,
    decision: str,
    *,
    arguments: dict[str, Any] | None = None,
    reason: str = "",
) -> Task:
    """Decide the task's (first) pending approval, then let the run go on."""
    waiting = pending(task)
    assert waiting, "nothing is pending"
    approval_decide(
        approval=waiting[0],
        user=user,
        decision=decision,
        arguments=arguments,
        reason=reason,
    )
    return advance(task)


def user_in(group: str, username: str, **fields: Any) -> Any:
    """A new user (the cast's password) in the ``approvers``/``auditors`` group."""
    user = get_user_model().objects.create_user(
        username=username, password=PASSWORD, **fields
    )
    user.groups.add(Group.objects.get(name=group))
    return user
