"""Fork from a step: continue a finished run live from step N as a new task.

Steps before N are copied (not re-executed) into a new task in a new
conversation owned by whoever forks. When N is a tool call, that call — with
edited arguments if given — and the later calls of the same model turn are
planned again the way a live run plans a turn (:class:`engine.planning.Planner`):
validation, policy, approval and taint (the parent's taint carries over), the
call cap, repeated-call detection and the circuit breaker. When N is a model
call, the model is asked again (possibly another model). The steps are written
through the journal's insert path (:func:`runs.steps.steps_insert`), and the
new task then runs through the normal runner.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from audit.models import AuditKind
from audit.services import audit_task
from engine.handoff import acting_agent, transfer_specs
from engine.handoff import run_limits as handoff_limits
from engine.planning import Planner
from engine.spec import (
    FINAL_STEP_STATUSES,
    AgentSnapshot,
    DetailKey,
    ErrorClass,
    StepKind,
    StepRecord,
    StepStatus,
    ToolCall,
)
from infra.errors import ErrorKind, ServiceError
from infra.runtime import redactor
from runs import events as notify
from runs import journal as run_journal
from runs import services as runs
from runs import steps as run_steps
from runs import tasks as run_tasks
from runs.models import Conversation, Step, Task


class ForkError(ServiceError):
    """A fork that cannot be made: an invalid request unless ``kind`` says it is
    the task's state (a conflict)."""


def _check(
    task: Task, from_seq: Any, arguments: Any, model: Any
) -> tuple[list[Step], Step]:
    if task.is_imported:
        raise ForkError(
            "Imported traces are read-only records; they cannot be forked.",
            ErrorKind.CONFLICT,
        )
    if not task.is_final:
        raise ForkError(
            f"The task is still {task.status}; fork it once it has finished.",
            ErrorKind.CONFLICT,
        )
    if isinstance(from_seq, bool) or not isinstance(from_seq, int):
        raise ForkError("from_seq must be the seq of a step (an integer).")
    steps = list(task.steps.order_by("seq"))
    target = next((s for s in steps if s.seq == from_seq), None)
    if target is None:
        raise ForkError(f"The task has no step {from_seq}.")
    if target.kind not in (Step.Kind.TOOL_CALL, Step.Kind.MODEL_CALL):
        raise ForkError(
            f"Step {from_seq} is a {target.kind}; fork from a model or tool call."
        )
    if arguments is not None:
        if target.kind != Step.Kind.TOOL_CALL:
            raise ForkError("arguments apply only when forking from a tool call.")
        if not isinstance(arguments, dict):
            raise ForkError("arguments must be a JSON object.")
    if model is not None and (
        not isinstance(model, str) or not model.strip() or len(model) > 200
    ):
        raise ForkError("model must be a model name (1 to 200 characters).")
    return steps, target


def _copied(step: Step, parent: Task) -> StepRecord:
    record = step.record()
    record.detail = {
        **record.detail,
        DetailKey.COPIED_FROM: {"task": str(parent.pk), "seq": step.seq},
    }
    if record.kind is StepKind.TOOL_CALL and record.status not in FINAL_STEP_STATUSES:
        # It never finished in the parent; the fork does not pick it up blind.
        record.status = StepStatus.SKIPPED
        record.error = record.error or "It did not finish in the parent run."
        record.error_class = record.error_class or ErrorClass.NOT_FINISHED
    return record


def task_fork(
    *,
    task: Task,
    user: Any,
    from_seq: int,
    arguments: dict[str, Any] | None = None,
    model: str | None = None,
    conversation: Conversation | None = None,
) -> Task:
    """Create and enqueue a fork of ``task`` from step ``from_seq``.

    The fork lives in a new conversation of ``user``, or in ``conversation`` when
    given (a retry in the run's own conversation: the fork is then its owner's).
    Raises :class:`ForkError` (invalid for a bad request, a conflict for a task
    that is imported or not finished). Edited arguments that fail the tool's
    schema are refused as invalid rather than handed to the model as a failed
    call.
    """
    steps, target = _check(task, from_seq, arguments, model)
    model_name = (model or "").strip() or task.model
    with transaction.atomic():
        if conversation is None:
            conversation = runs.conversation_create(owner=user, agent=task.agent)
        fork = runs.task_start(
            conversation=conversation,
            content=task.goal,
            parent=task,
            parent_seq=from_seq,
            model=model_name,
        )
        fork = Task.objects.select_for_update().get(pk=fork.pk)
        # The new conversation has no earlier turns; carry the parent's.
        snapshot = AgentSnapshot.from_json(fork.agent_snapshot).replace(
            history=tuple(run_journal.run_history(task))
        )
        fork.agent_snapshot = snapshot.to_json()
        fork.save(update_fields=["agent_snapshot"])

        records = [_copied(s, task) for s in steps if s.seq < from_seq]
        if target.kind == Step.Kind.TOOL_CALL:
            # The turn is its proposer's: the agent acting then (a handoff
            # among the copies hands the fork on as it did the parent).
            turn_seq = target.parent_seq
            _, acting = acting_agent(records, snapshot, before_seq=turn_seq)
            records += _replanned(
                fork=fork,
                parent=task,
                steps=steps,
                target=target,
                arguments=arguments,
                copied=records,
                planner=Planner(
                    specs={**acting.specs(), **transfer_specs(acting)},
                    limits=handoff_limits(
                        run_tasks.run_limits(fork, snapshot=snapshot),
                        records,
                        before_seq=turn_seq,
                    ),
                    redactor=redactor(),
                ),
            )
        # Copies and re-planned calls alike go in the way a run writes its steps
        # (counters bumped, parked calls' requests opened).
        run_steps.steps_insert(task=fork, records=records)
        audit_task(
            AuditKind.TASK_FORKED,
            task_id=fork.pk,
            actor=user,
            data={
                "parent": str(task.pk),
                "from_seq": from_seq,
                "edited": arguments is not None,
                "model": model_name,
            },
        )
        notify.task_changed_on_commit(fork.pk)
    fork.refresh_from_db()
    return fork


def _replanned(
    *,
    fork: Task,
    parent: Task,
    steps: list[Step],
    target: Step,
    arguments: dict[str, Any] | None,
    copied: list[StepRecord],
    planner: Planner,
) -> list[StepRecord]:
    """The call at N and its later siblings of one turn, planned anew.

    Planned as a live run plans a turn, over the copied steps: the copied
    model_call step's stop flag is the new plan's.
    """
    turn = next((r for r in copied if r.seq == target.parent_seq), None)
    if turn is None or turn.kind is not StepKind.MODEL_CALL:
        raise ForkError(f"Step {target.seq} belongs to no model call of this task.")
    siblings = [
        s
        for s in steps
        if s.kind == Step.Kind.TOOL_CALL
        and s.parent_seq == target.parent_seq
        and s.seq >= target.seq
    ]
    calls = [
        ToolCall(
            call_id=original.call_id or f"call_{original.call_index or 0}",
            name=original.tool or "",
            raw_arguments=(
                json.dumps(arguments, ensure_ascii=False)
                if _edited(original, target, arguments)
                else (original.raw_arguments or "")
            ),
            index=original.call_index or 0,
        )
        for original in siblings
    ]
    plan = planner.plan_turn(
        turn,
        calls,
        steps=copied,
        task_id=str(fork.pk),
        inherited_taint=fork.tainted_by or [],
    )
    plan.flag(turn)
    for original, record in zip(siblings, plan.calls, strict=True):
        record.agent = original.agent
        if not _edited(original, target, arguments):
            continue
        if record.status is StepStatus.FAILED and record.error_class in (
            ErrorClass.INVALID_JSON,
            ErrorClass.INVALID_ARGUMENTS,
        ):
            raise ForkError(record.error or "The edited arguments are invalid.")
        # The two fields of docs/api.md still speak of the model's call: the string
        # it sent, and its object (what ran in the parent may be an approver's edit).
        record.raw_arguments = original.raw_arguments
        record.proposed_arguments = (
            original.proposed_arguments
            if original.proposed_arguments is not None
            else original.arguments
        )
        record.detail[DetailKey.FORK] = {
            "edited": True,
            "parent": str(parent.pk),
            "original_arguments": original.arguments,
        }
    return plan.steps


def _edited(original: Step, target: Step, arguments: dict[str, Any] | None) -> bool:
    return original.pk == target.pk and arguments is not None
