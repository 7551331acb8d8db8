"""Step writes: the one way a step is first written and the one way it changes.

:func:`steps_insert` and :func:`step_transition`, each with one bump of the
task's rev and counters (:func:`_bump`, fenced by the run's lease when it has
one); what is stored of a step is redacted and clipped (:func:`_stored`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_task
from engine.canonical import dumps
from engine.journal import LeaseLost
from engine.routing import Route
from engine.spec import (
    DetailKey,
    ErrorClass,
    StepKind,
    StepRecord,
    StepStatus,
    TaskStatus,
)
from infra import runtime
from runs import counters, ports
from runs import events as notify
from runs.leases import Lease
from runs.models import Step, Task
from runs.sql import _BUMPED, _bump_sql, _insert_steps, _step_update_sql, _task_pk_param

# -- writing steps -----------------------------------------------------------------


def steps_insert(
    *,
    task: Task,
    records: Sequence[StepRecord],
    lease: Lease | None = None,
    task_tainted_by: list[str] | None = None,
) -> list[Step]:
    """Write new steps of ``task``: the one way a step is first written.

    One UPDATE bumps the task's rev (one per step: the steps take those revs in
    order), its token counters and its step count, then one INSERT writes the
    steps, redacted and clipped (:func:`_stored`). A step that waits for approval
    opens its request; the task's watchers are told after commit.

    Runs inside the caller's transaction. With a ``lease`` the bump is fenced by
    it (:class:`LeaseLost` when another worker took the run over); without one
    the caller holds the task row's lock. ``task.rev`` is kept up to date.
    ``task_tainted_by``, when given, becomes the task's taint sources in the
    same UPDATE (a finished untrusted read written with its turn).
    """
    _require_transaction("steps_insert")
    if not records:
        return []
    usage = [0, 0, 0]
    cost = 0.0
    estimated = 0
    route: Route | None = None
    for record in records:
        if record.kind is StepKind.MODEL_CALL and record.usage:
            usage[0] += record.usage.get("prompt_tokens", 0)
            usage[1] += record.usage.get("completion_tokens", 0)
            usage[2] += record.usage.get("total_tokens", 0)
            estimated += 1 if record.usage.get("estimated") else 0
        if record.kind is StepKind.MODEL_CALL:
            if DetailKey.COPIED_FROM not in record.detail:
                # A copy (a fork's) was paid for by the run it was copied from.
                cost += record.cost_usd or 0.0
            if DetailKey.ROUTE in record.detail:
                route = Route.from_json(record.detail[DetailKey.ROUTE])
    now = timezone.now()
    last = _bump(
        task,
        lease,
        now,
        count=len(records),
        usage=usage,
        steps=len(records),
        cost=cost,
        estimated=estimated,
        tainted_by=task_tainted_by,
    )
    first = last - len(records) + 1
    if route is not None:
        # The run's routing call chose (once per run): the task shows its intent.
        task.intent = route.intent
        Task.objects.filter(pk=task.pk).update(intent=route.intent)
    rows = []
    for offset, record in enumerate(records):
        row = Step(task_id=task.pk, seq=record.seq, rev=first + offset)
        row.apply(_stored(record))
        rows.append(row)
    _insert_steps(rows)
    rows.sort(key=lambda r: r.seq)
    for row in rows:
        if row.status == StepStatus.WAITING_APPROVAL:
            ports.approvals().open(task=task, step=row)
        elif row.error_class == ErrorClass.TOOL_CALL_LIMIT and (
            DetailKey.COPIED_FROM not in row.detail
        ):
            audit_task(
                AuditKind.TOOL_CALL_LIMITED,
                task_id=task.pk,
                actor="system",
                data={"tool": row.tool, "seq": row.seq},
            )
    if lease is None:
        notify.task_changed_on_commit(task.pk)
    else:
        # The run's driver: its task's counters are current (the bump returned
        # them), so the write pushes itself; a model call changed the usage.
        notify.changes_on_commit(
            task,
            rows,
            base=first - 1,
            with_task=task_tainted_by is not None
            or any(r.kind == StepKind.MODEL_CALL for r in records),
        )
    counters.count_steps_on_commit(task, rows)
    return rows


def step_transition(
    *,
    task: Task,
    step: Step,
    lease: Lease | None = None,
    with_task: bool = False,
    task_tainted_by: list[str] | None = None,
    **changes: Any,
) -> Step:
    """Change a written step: the one way a step changes.

    Applies ``changes`` to ``step``, bumps the task's rev, saves the step with
    that rev and tells the task's watchers after commit. Used by the journal,
    by approval decisions, expiry and cancellation alike.

    Runs inside the caller's transaction. With a ``lease`` the bump is fenced by
    it (:class:`LeaseLost` when another worker took the run over), and
    ``with_task`` adds the task's event to the push (the write changed the task
    too); without one the caller holds the task row's lock. ``task.rev`` is kept
    up to date, so a caller that saves the task afterwards does not write an old
    rev back. ``task_tainted_by``, when given, becomes the task's taint sources
    in the same bump.

    The journal calls this twice per tool call, so it is raw SQL: the bump, the
    rev read back and the step's UPDATE, the statements the ORM would send
    without its cost per query (ten times the query's own).
    """
    _require_transaction("step_transition")
    for name, value in changes.items():
        setattr(step, name, value)
    now = timezone.now()
    step.rev = _bump(task, lease, now, tainted_by=task_tainted_by)
    with connection.cursor() as cursor:
        sql, params = _step_update_sql(step)
        cursor.execute(sql, params)
    if lease is None:
        notify.task_changed_on_commit(task.pk)
    else:
        notify.changes_on_commit(task, [step], base=step.rev - 1, with_task=with_task)
    counters.count_steps_on_commit(task, [step])
    return step


def _require_transaction(name: str) -> None:
    if not connection.in_atomic_block:
        raise TransactionManagementError(
            f"{name} writes inside the caller's transaction (with the task locked)."
        )


def _bump(
    task: Task,
    lease: Lease | None,
    now: Any,
    *,
    count: int = 1,
    usage: Sequence[int] = (0, 0, 0),
    steps: int = 0,
    cost: float = 0.0,
    estimated: int = 0,
    tainted_by: list[str] | None = None,
) -> int:
    """Bump the task's rev by ``count`` (and its token, step, cost and estimate
    counters) and set its ``updated_at`` to ``now``, in one statement; return the
    new rev. A task whose cost is unknown (null) stays unknown: null plus a cost
    is null in SQL. ``tainted_by`` (when given) is set as the task's taint
    sources in the same statement.

    With a lease the UPDATE is the fence: it matches only under the same owner
    and epoch while the run is running. Either way it locks the row (PostgreSQL)
    inside the transaction that SQLite's IMMEDIATE mode already holds, so the
    counters it returns are ours; they are set on ``task``, and so is its
    ``cancel_requested`` as of the write (the journal's next control check may
    answer from it).
    """
    param = _task_pk_param(task.pk)
    updated_at = Task._meta.get_field("updated_at").get_db_prep_save(now, connection)
    params = [count, *usage, steps, cost, estimated]
    if tainted_by is not None:
        field = Task._meta.get_field("tainted_by")
        params.append(field.get_db_prep_save(tainted_by, connection))
    params += [updated_at, param]
    if lease is not None:
        params += [lease.owner, lease.epoch, TaskStatus.RUNNING.value]
    with connection.cursor() as cursor:
        cursor.execute(_bump_sql(lease is not None, tainted_by is not None), params)
        row = cursor.fetchone()
    if row is None:
        if lease is not None:
            raise LeaseLost(str(task.pk))
        raise Task.DoesNotExist(str(task.pk))
    *counters, cancel_requested = row
    for name, value in zip(_BUMPED, counters, strict=True):
        if name == "cost_usd":
            setattr(task, name, float(value) if value is not None else None)
        else:
            setattr(task, name, int(value))
    task.cancel_requested = bool(cancel_requested)
    task.updated_at = now
    if tainted_by is not None:
        task.tainted_by = list(tainted_by)
    return task.rev


def _redact_text(text: str | None) -> str | None:
    return runtime.redactor().text(text) if text else text


def _stored(record: StepRecord) -> StepRecord:
    """What is persisted of a step: redacted, then clipped.

    The engine redacts what it knows to be payloads; this catches the rest
    (validation messages quoting arguments, attempt errors, model errors that
    echo a key) on the one path every step takes to the database.
    """
    r = runtime.redactor()
    redacted = record.copy(
        arguments=r.data(record.arguments),
        raw_arguments=_redact_text(record.raw_arguments),
        proposed_arguments=r.data(record.proposed_arguments),
        result=r.data(record.result),
        error=_redact_text(record.error),
        attempts=r.data(list(record.attempts or [])),
        response=r.data(record.response),
        detail=r.data(dict(record.detail or {})),
    )
    return _clip(redacted)


def _clip(record: StepRecord) -> StepRecord:
    """Bound what is stored of a result (the model already saw a shaped one).

    A result clipped before (a copy of a stored step) stays as it is.
    """
    limit = settings.REACH_MAX_STORED_RESULT_CHARS
    if record.result is not None and not _clipped(record.result):
        text = dumps(record.result)
        if len(text) > limit:
            return record.copy(
                result={
                    "truncated": True,
                    "partial_result": text[:limit],
                    "total_chars": len(text),
                }
            )
    return record


def _clipped(result: Any) -> bool:
    return (
        isinstance(result, dict)
        and result.keys() == {"truncated", "partial_result", "total_chars"}
        and result["truncated"] is True
    )


__all__ = [
    "step_transition",
    "steps_insert",
]
