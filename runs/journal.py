"""The journal: the engine's port onto the database, fenced by one lease.

:class:`DjangoJournal` reads a run's snapshot and control, and writes its steps
(:mod:`runs.steps`), its parking and its end (:mod:`runs.finish`), each under the
run's lease; :func:`run_history` is the conversation a run carries.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.utils import timezone

from engine.journal import Control, LeaseLost, RunSnapshot
from engine.spec import (
    AgentSnapshot,
    ErrorClass,
    StepDetail,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    TaskStatus,
    ToolSpec,
    Usage,
    taint_label,
)
from infra.logging import current_intent
from runs import events as notify
from runs import ports
from runs.finish import _finish_task
from runs.leases import Lease, _write_transaction
from runs.models import Message, Step, Task
from runs.sql import _control_sql, _task_pk_param
from runs.steps import _stored, step_transition, steps_insert

# -- the journal -------------------------------------------------------------------


#: The task's columns a snapshot (and run_history) reads.
_SNAPSHOT_FIELDS = (
    "id",
    "conversation_id",
    "goal",
    "model",
    "agent_snapshot",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "tainted_by",
    "active_seconds",
    "created_at",
)


#: A control check this soon after the journal's own fenced write answers from
#: what that write read: the lease held then, and the cancel flag was as it read.
#: A cancel (or a takeover) in between is seen at the next check, as one just
#: after a read would be.
CONTROL_FRESH_S = 0.05


class DjangoJournal:
    """The engine's Journal over the database, fenced by one lease."""

    def __init__(self, task: Task, *, owner: str, epoch: int) -> None:
        self.task_id = str(task.pk)
        self._task_pk = task.pk
        # What the step writes carry: the task (its rev kept current) and the fence.
        self._task = task
        self._lease = Lease(owner, epoch)
        self.owner = owner
        self.epoch = epoch
        self._claimed_at = time.monotonic()
        self._active_before = task.active_seconds
        # Step ids by seq, so an update needs no lookup (filled as steps are seen).
        self._step_pks: dict[int, int] = {}
        # What task events and approval requests show, loaded once.
        self._agent = task.agent
        self._owner = task.owner
        # When this journal's last fenced write committed (monotonic seconds).
        self._written_at = float("-inf")
        # The row the driver loaded just after its claim serves the run's first
        # snapshot (no second read of the task); later snapshots read it again.
        deferred = task.get_deferred_fields()
        self._first: Task | None = (
            None if deferred.intersection(_SNAPSHOT_FIELDS) else task
        )

    # reading

    def snapshot(self) -> RunSnapshot:
        task = self._first or Task.objects.only(*_SNAPSHOT_FIELDS).get(pk=self._task_pk)
        self._first = None
        rows = list(task.steps.order_by("seq"))
        self._step_pks.update((row.seq, row.pk) for row in rows)
        steps = [row.record() for row in rows]
        snapshot = AgentSnapshot.from_json(task.agent_snapshot)
        return RunSnapshot(
            goal=task.goal,
            system=snapshot.system_prompt,
            model=task.model,
            steps=steps,
            usage=Usage(task.prompt_tokens, task.completion_tokens, task.total_tokens),
            history=run_history(task, snapshot=snapshot),
            inherited_taint=list(task.tainted_by or []),
            active_seconds=task.active_seconds,
        )

    def control(self) -> Control:
        if time.monotonic() - self._written_at < CONTROL_FRESH_S:
            # A write committed just now: its UPDATE was fenced by this lease
            # (it would have raised LeaseLost) and read the cancel flag.
            return Control(cancelled=self._task.cancel_requested)
        # Raw SQL on the per-step path: the ORM costs ten times the query here.
        with connection.cursor() as cursor:
            cursor.execute(_control_sql(), [_task_pk_param(self._task_pk)])
            row = cursor.fetchone()
        if (
            row is None
            or row[0] != self.owner
            or row[1] != self.epoch
            or row[3] != TaskStatus.RUNNING
        ):
            raise LeaseLost(self.task_id)
        return Control(cancelled=bool(row[2]))

    def active_seconds(self) -> float:
        return self._active_before + (time.monotonic() - self._claimed_at)

    # writing (every write locks the task row and checks the lease)

    def _locked_task(self) -> Task:
        # The snapshot (tool definitions) is large and never written here.
        task = (
            Task.objects.select_for_update()
            .defer("agent_snapshot")
            .get(pk=self._task_pk)
        )
        if (
            task.lease_owner != self.owner
            or task.lease_epoch != self.epoch
            or task.status != TaskStatus.RUNNING
        ):
            raise LeaseLost(self.task_id)
        task.agent, task.owner = self._agent, self._owner
        return task

    def append(self, steps: Sequence[StepRecord]) -> list[StepRecord]:
        """One fenced UPDATE of the task's counters (and of its taint, when a
        finished untrusted read is among the steps), one INSERT of the steps."""
        with _write_transaction():
            rows = steps_insert(
                task=self._task,
                records=steps,
                lease=self._lease,
                task_tainted_by=self._tainted_by(steps),
            )
            self._step_pks.update((row.seq, row.pk) for row in rows)
        self._written_at = time.monotonic()
        if self._task.intent and current_intent.get() != self._task.intent:
            # The routing call chose: the run's later log lines carry it.
            current_intent.set(self._task.intent)
        return [row.record() for row in rows]

    def update(self, step: StepRecord) -> StepRecord:
        """One fenced UPDATE of the task (its rev, and its taint when an
        untrusted result taints it), one UPDATE of the step."""
        with _write_transaction():
            row = Step(task_id=self._task_pk, seq=step.seq, rev=self._task.rev)
            row.apply(_stored(step))
            row.pk = self._step_pk(step.seq)
            tainted_by = self._tainted_by([step])
            step_transition(
                task=self._task,
                step=row,
                lease=self._lease,
                with_task=tainted_by is not None,
                task_tainted_by=tainted_by,
            )
        self._written_at = time.monotonic()
        return row.record()

    def _tainted_by(self, steps: Sequence[StepRecord]) -> list[str] | None:
        """The task's taint sources with those ``steps`` add (a succeeded or
        cached result of an untrusted tool); None when they add none.

        The task's sources as this journal holds them are current: while the
        run is leased, only its driver adds to them (the bump that writes them
        is fenced by the lease).
        """
        current = list(self._task.tainted_by or [])
        added = [
            label
            for step in steps
            if step.kind is StepKind.TOOL_CALL
            and StepDetail(step.detail).untrusted
            and step.status in (StepStatus.SUCCEEDED, StepStatus.CACHED)
            and (label := taint_label(step.tool, step.seq, str(self._task_pk)))
            not in current
        ]
        return [*current, *dict.fromkeys(added)] if added else None

    def _step_pk(self, seq: int) -> int:
        pk = self._step_pks.get(seq)
        if pk is None:
            pk = Step.objects.only("pk").get(task_id=self._task_pk, seq=seq).pk
            self._step_pks[seq] = pk
        return pk

    def park(self) -> bool:
        with _write_transaction():
            task = self._locked_task()
            waiting = task.steps.filter(status=StepStatus.WAITING_APPROVAL).exists()
            if not waiting:
                # Decided while we were busy: go on instead of parking.
                return False
            task.status = TaskStatus.WAITING_APPROVAL
            task.lease_owner = ""
            task.lease_expires_at = None
            task.active_seconds = self.active_seconds()
            task.rev += 1
            task.updated_at = timezone.now()
            task.save(
                update_fields=[
                    "status",
                    "lease_owner",
                    "lease_expires_at",
                    "active_seconds",
                    "rev",
                    "updated_at",
                ]
            )
            notify.changes_on_commit(task, [], base=task.rev - 1)
            if task.webhook_url:
                ports.task_outcome.send(sender=Task, task=task, parked=True)
        return True

    def finish(
        self,
        reason: StopReason,
        *,
        answer: str | None,
        message: str | None,
        answer_json: Any = None,
    ) -> None:
        with _write_transaction():
            task = self._locked_task()
            if reason is StopReason.CANCELLED:
                ports.approvals().cancel_for_task(task=task)
                self._skip_open_steps(task)
            task.active_seconds = self.active_seconds()
            _finish_task(task, reason, answer=answer, message=message)
            if answer_json is not None:
                # Parsed from the redacted answer: nothing more to scrub.
                task.answer_json = answer_json
            task.updated_at = timezone.now()
            task.save()
            notify.changes_on_commit(task, [], base=task.rev - 1)

    def _skip_open_steps(self, task: Task) -> None:
        open_steps = task.steps.filter(
            status__in=[
                StepStatus.RUNNING,
                StepStatus.WAITING_APPROVAL,
                StepStatus.APPROVED,
            ]
        )
        # The caller (finish) saves the task; each step keeps the rev it takes.
        for row in open_steps:
            step_transition(
                task=task,
                step=row,
                status=StepStatus.SKIPPED,
                error=row.error or "Cancelled before it ran.",
                error_class=row.error_class or ErrorClass.CANCELLED,
                finished_at=row.finished_at or timezone.now(),
            )

    def outcome_unknown(self, step: StepRecord, spec: ToolSpec | None) -> StepRecord:
        """A write's outcome is unknown and it is not safe to retry: ask a human.

        Either the worker stopped while it ran (a crash), or it timed out and its
        handler was abandoned, so it may still be finishing.
        """
        timed_out = step.error_class == ErrorClass.TIMEOUT
        with _write_transaction():
            task = self._locked_task()
            row = Step.objects.select_for_update().get(task=task, seq=step.seq)
            if timed_out:
                # Keep what the attempt recorded (its duration and error).
                pk = row.pk
                row.apply(_stored(step))
                row.pk = pk
            step_transition(
                task=task,
                step=row,
                status=StepStatus.WAITING_APPROVAL,
                error=(
                    f"{step.error} Whether it happened is unknown. An operator must "
                    "check before it is retried."
                    if timed_out
                    else "The worker stopped while this call was running; whether "
                    "it happened is unknown. An operator must check before it is "
                    "retried."
                ),
                error_class=ErrorClass.OUTCOME_UNKNOWN,
            )
            ports.approvals().open(task=task, step=row, recovery=True)
        return row.record()


def run_history(
    task: Task, *, snapshot: AgentSnapshot | None = None, limit: int = 20
) -> list[dict[str, str]]:
    """Earlier turns of the run's conversation: user messages and final replies.

    ``snapshot`` is the task's :class:`AgentSnapshot` when the caller has it.
    """
    snapshot = snapshot or AgentSnapshot.from_json(task.agent_snapshot)
    if snapshot.history is not None:
        # A fork carries its parent's context (it lives in a new conversation).
        return [dict(turn) for turn in snapshot.history][-limit:]
    messages = list(
        Message.objects.filter(
            conversation_id=task.conversation_id, created_at__lt=task.created_at
        )
        .exclude(task=task)
        .order_by("-created_at", "-id")[:limit]
    )
    messages.reverse()
    # Keep whole pairs, starting with a user message.
    while messages and messages[0].role != Message.Role.USER:
        messages.pop(0)
    return [{"role": m.role, "content": m.content} for m in messages]


__all__ = [
    "DjangoJournal",
    "run_history",
]
