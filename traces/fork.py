"""Fork from a step: continue a finished run live from step N as a new task.

Steps before N are copied (not re-executed) into a new task in a new
conversation owned by whoever forks. When N is a tool call, that call — with
edited arguments if given — and the later calls of the same model turn are
planned again under the full current policy (validation, approval, taint; the
parent's taint carries over). When N is a model call, the model is asked again
(possibly another model). The new task then runs through the normal runner.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from approvals.services import approval_create
from audit.services import audit_append
from engine.loop import Engine
from engine.model_client import ModelReply
from engine.spec import FINAL_STEP_STATUSES, StepKind, StepRecord, StepStatus, ToolCall
from infra.runtime import executor, redactor
from registry.services import toolbox_for_snapshot
from runs import events as notify
from runs import services as runs
from runs.models import Step, Task
from traces.replay import run_limits


class ForkError(Exception):
    """A fork that cannot be made; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class _NoModel:
    """Planning a fork never calls a model."""

    def complete(self, **_: Any) -> ModelReply:
        raise AssertionError("a fork plans without calling the model")


def _check(
    task: Task, from_seq: Any, arguments: Any, model: Any
) -> tuple[list[Step], Step]:
    if task.is_imported:
        raise ForkError(
            "Imported traces are read-only records; they cannot be forked.", 409
        )
    if not task.is_final:
        raise ForkError(
            f"The task is still {task.status}; fork it once it has finished.", 409
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
        "copied_from": {"task": str(parent.pk), "seq": step.seq},
    }
    if record.kind is StepKind.TOOL_CALL and record.status not in FINAL_STEP_STATUSES:
        # It never finished in the parent; the fork does not pick it up blind.
        record.status = StepStatus.SKIPPED
        record.error = record.error or "It did not finish in the parent run."
        record.error_class = record.error_class or "not_finished"
    return record


def task_fork(
    *,
    task: Task,
    user: Any,
    from_seq: int,
    arguments: dict[str, Any] | None = None,
    model: str | None = None,
) -> Task:
    """Create and enqueue a fork of ``task`` from step ``from_seq``.

    Raises :class:`ForkError` (400 for a bad request, 409 for a task that is
    imported or not finished). Edited arguments that fail the tool's schema are
    refused with 400 rather than handed to the model as a failed call.
    """
    steps, target = _check(task, from_seq, arguments, model)
    model_name = (model or "").strip() or task.model
    with transaction.atomic():
        conversation = runs.conversation_create(owner=user, agent=task.agent)
        fork = runs.task_start(
            conversation=conversation,
            content=task.goal,
            parent=task,
            parent_seq=from_seq,
            model=model_name,
        )
        fork = Task.objects.select_for_update().get(pk=fork.pk)
        snapshot = dict(fork.agent_snapshot or {})
        # The new conversation has no earlier turns; carry the parent's.
        snapshot["history"] = runs._history(task)
        fork.agent_snapshot = snapshot

        records = [_copied(s, task) for s in steps if s.seq < from_seq]
        if target.kind == Step.Kind.TOOL_CALL:
            records += _replanned(
                fork=fork,
                parent=task,
                steps=steps,
                target=target,
                arguments=arguments,
                copied=records,
                planner=Engine(
                    model_client=_NoModel(),
                    toolbox=toolbox_for_snapshot(snapshot),
                    executor=executor(),
                    limits=run_limits(fork),
                    redactor=redactor(),
                ),
            )

        rows = []
        for record in records:
            fork.rev += 1
            row = Step(task=fork, seq=record.seq, rev=fork.rev)
            row.apply(record)
            rows.append(row)
            if record.kind is StepKind.MODEL_CALL and record.usage:
                fork.prompt_tokens += record.usage.get("prompt_tokens", 0)
                fork.completion_tokens += record.usage.get("completion_tokens", 0)
                fork.total_tokens += record.usage.get("total_tokens", 0)
        Step.objects.bulk_create(rows)
        fork.step_count = len(rows)
        fork.save(
            update_fields=[
                "agent_snapshot",
                "rev",
                "step_count",
                "prompt_tokens",
                "completion_tokens",
                "total_tokens",
            ]
        )
        saved = list(fork.steps.order_by("seq"))
        for row in saved:
            if row.status == StepStatus.WAITING_APPROVAL:
                approval_create(task=fork, step=row)
        audit_append(
            kind="task.forked",
            actor=user,
            task_id=fork.pk,
            object_type="task",
            object_id=fork.pk,
            data={
                "parent": str(task.pk),
                "from_seq": from_seq,
                "edited": arguments is not None,
                "model": model_name,
            },
        )
        notify.task_changed_on_commit(fork.pk)
    return fork


def _replanned(
    *,
    fork: Task,
    parent: Task,
    steps: list[Step],
    target: Step,
    arguments: dict[str, Any] | None,
    copied: list[StepRecord],
    planner: Engine,
) -> list[StepRecord]:
    """The call at N and its later siblings of one turn, planned anew."""
    taint = list(fork.tainted_by or [])
    for record in copied:
        if record.kind is StepKind.TOOL_CALL and record.detail.get("untrusted"):
            label = f"{record.tool}#{record.seq}"
            if label not in taint:
                taint.append(label)
    siblings = [
        s
        for s in steps
        if s.kind == Step.Kind.TOOL_CALL
        and s.parent_seq == target.parent_seq
        and s.seq >= target.seq
    ]
    planned: list[StepRecord] = []
    for original in siblings:
        edited = original.pk == target.pk and arguments is not None
        raw = (
            json.dumps(arguments, ensure_ascii=False)
            if edited
            else (original.raw_arguments or "")
        )
        call = ToolCall(
            call_id=original.call_id or f"call_{original.call_index or 0}",
            name=original.tool or "",
            raw_arguments=raw,
            index=original.call_index or 0,
        )
        # The engine's own planning: validation, policy, approval and taint.
        record = planner._plan_call(call, copied + planned, taint)
        record.seq = original.seq
        record.parent_seq = original.parent_seq
        record.idempotency_key = f"{fork.pk}:{original.parent_seq}:{call.index}"
        if edited:
            if record.status is StepStatus.FAILED and record.error_class in (
                "invalid_json",
                "invalid_arguments",
            ):
                raise ForkError(record.error or "The edited arguments are invalid.")
            record.proposed_arguments = original.arguments
            record.detail["fork"] = {
                "edited": True,
                "parent": str(parent.pk),
                "original_arguments": original.arguments,
            }
        planned.append(record)
    return planned
