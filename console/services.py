"""What an operator does from the console: cancel, re-queue, retry.

Each action checks the operator's permission, goes through the service that owns
it (``runs.services.task_cancel``, ``runs.tasks.enqueue_advance``,
``traces.fork.task_fork``) and is audited with the operator as its actor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_task
from console.board import long_queued_runs, stuck_runs
from console.permissions import can_operate_console
from infra.errors import ErrorKind, ServiceError
from runs import services as runs
from runs import tasks as run_tasks
from runs.models import Task
from traces.fork import ForkError, task_fork


class ConsoleError(ServiceError):
    """An action that cannot be done now: a conflict with the run's state unless
    ``kind`` says otherwise."""

    default_kind = ErrorKind.CONFLICT


def _require_operator(user: Any) -> None:
    if not can_operate_console(user):
        raise PermissionDenied("Only operators act on runs from the console.")


@dataclass
class CancelOutcome:
    cancelled: list[Task] = field(default_factory=list)
    #: Runs that were final already (nothing to cancel), with their status.
    final: list[Task] = field(default_factory=list)


def console_cancel(*, tasks: Iterable[Task], user: Any) -> CancelOutcome:
    """Cancel each of ``tasks`` (one or many): at once when nobody drives it, at
    the next step boundary when a worker does. Each is audited by
    ``task_cancel`` (``task.cancel_requested``, the operator as actor)."""
    _require_operator(user)
    outcome = CancelOutcome()
    for task in tasks:
        try:
            outcome.cancelled.append(runs.task_cancel(task=task, user=user))
        except runs.TaskFinal:
            task.refresh_from_db(fields=["status"])
            outcome.final.append(task)
    return outcome


def console_requeue(*, task: Task, user: Any) -> Task:
    """Put a stuck run (or one queued too long) back on the broker now, instead of
    waiting for the reaper; the next worker claims it and takes its lease over."""
    _require_operator(user)
    now = timezone.now()
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task.pk)
        stuck = stuck_runs(now).filter(pk=task.pk).exists()
        if not (stuck or long_queued_runs(now).filter(pk=task.pk).exists()):
            raise ConsoleError(
                f"The run is {task.status} and not stuck: nothing to re-queue."
            )
        audit_task(
            AuditKind.TASK_REQUEUED,
            task_id=task.pk,
            actor=user,
            data={
                "status": task.status,
                "stuck": stuck,
                "lease_owner": task.lease_owner,
                "lease_epoch": task.lease_epoch,
            },
        )
        run_tasks.enqueue_advance(task.pk)
    return task


def console_retry(*, task: Task, user: Any, from_seq: int) -> Task:
    """Retry a failed run from step ``from_seq`` in its own conversation.

    The fork machinery does it (``traces.fork.task_fork``): steps before
    ``from_seq`` are copied, the call at ``from_seq`` is planned again or the
    model asked again; the new run belongs to the conversation's owner.
    """
    _require_operator(user)
    if task.status != Task.Status.FAILED:
        raise ConsoleError(
            f"Only failed runs are retried from the console; this one is {task.status}."
        )
    try:
        retry = task_fork(
            task=task, user=user, from_seq=from_seq, conversation=task.conversation
        )
    except ForkError as exc:
        raise ConsoleError(str(exc), exc.kind) from exc
    except runs.ConversationBusy as busy:
        raise ConsoleError(
            f"Its conversation has a run still active ({busy.task.pk}); cancel it "
            "or let it finish first."
        ) from busy
    except runs.ConversationReadOnly as exc:
        raise ConsoleError(str(exc)) from exc
    audit_task(
        AuditKind.TASK_RETRIED,
        task_id=retry.pk,
        actor=user,
        data={"parent": str(task.pk), "from_seq": from_seq},
    )
    return retry
