"""Runs: starting, claiming, advancing, cancelling and reaping tasks.

The Celery task ``advance`` is a thin shell over :func:`task_advance`. A run is
claimed with a guarded UPDATE that bumps its lease epoch; every later write of that
run is conditional on the same owner and epoch (:class:`DjangoJournal`), so a
worker whose lease was taken over stops instead of writing beside the new owner.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    connections,
    transaction,
)
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Coalesce
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_append, audit_task
from engine.canonical import dumps
from engine.evaluation import EvalCase, eval_toolbox
from engine.loop import Control, Engine, LeaseLost, Outcome, RunSnapshot
from engine.model_client import ModelClient, ModelError, UnavailableModel
from engine.pricing import snapshot_price
from engine.routing import ROUTE_KEY, ROUTING_KEY, Route, Routing
from engine.spec import (
    FINAL_TASK_STATUSES,
    AgentSnapshot,
    DetailKey,
    ErrorClass,
    Limits,
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
from infra import runtime
from infra.logging import current_intent, current_task_id
from registry.services import (
    agent_snapshot_of,
    snapshot_priced,
    snapshot_routed,
    toolbox_for_snapshot,
)
from runs import counters, ports
from runs import events as notify

# The module, not its names: runs.tasks imports this module too.
from runs import tasks as celery_tasks
from runs.budgets import DailyBudgetExceeded, budget_check
from runs.models import Conversation, Message, Step, Task

log = logging.getLogger(__name__)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


class ConversationBusy(Exception):
    """A task of this conversation is still queued or running."""

    def __init__(self, task: Task) -> None:
        super().__init__(str(task.pk))
        self.task = task


class ConversationReadOnly(ValueError):
    """The conversation holds an imported trace: a record, not a chat to go on.

    A ``ValueError`` still, for callers that treat every refusal of a message
    alike; the API tells it apart (409: the conversation's state, not the
    message, is what refuses it).
    """


class TaskFinal(Exception):
    """The task already reached a final status."""


# -- starting --------------------------------------------------------------------


def conversation_create(*, owner: Any, agent: Any) -> Conversation:
    now = timezone.now()
    return Conversation.objects.create(
        owner=owner, agent=agent, created_at=now, updated_at=now
    )


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


def _history_taint(conversation: Conversation) -> list[str]:
    """Taint sources of the conversation's earlier tasks (they carry over)."""
    sources: list[str] = []
    for tainted in conversation.tasks.exclude(tainted_by=[]).values_list(
        "tainted_by", flat=True
    ):
        for source in tainted or []:
            if source not in sources:
                sources.append(source)
    return sources


def _locked(conversation: Conversation) -> Conversation:
    """``conversation`` read again under its row lock, keeping the owner and the
    agent the caller already loaded when the row still names them."""
    locked = Conversation.objects.select_for_update().get(pk=conversation.pk)
    for name in ("owner", "agent"):
        field = Conversation._meta.get_field(name)
        if field.is_cached(conversation) and getattr(locked, field.attname) == getattr(
            conversation, field.attname
        ):
            field.set_cached_value(locked, field.get_cached_value(conversation))
    return locked


def task_start(
    *,
    conversation: Conversation,
    content: str,
    parent: Task | None = None,
    parent_seq: int | None = None,
    model: str | None = None,
    eval_case: dict[str, Any] | None = None,
    enforce_budget: bool = False,
    routed: bool = True,
) -> Task:
    """Record the user's message and a new task for it; enqueue it after commit.

    ``eval_case`` marks an evaluation run (see :mod:`engine.evaluation`).
    ``enforce_budget`` refuses the message with :class:`DailyBudgetExceeded`
    when the owner's daily budget is used up (a user's own message; forks,
    retries and evaluations are operators' and are not refused). ``routed``
    False offers every tool whatever the agent's toolsets (a call that names
    its tool, as the MCP gateway's do).

    The run's price is read here, once, into its snapshot; so is its route
    when the agent's toolset rules pick one (:mod:`engine.routing`).
    """
    # What the user typed is recorded and sent to the model: secrets are not.
    content = runtime.redactor().text(content.strip())
    if not content:
        raise ValueError("The message is empty.")
    if len(content) > settings.REACH_MAX_MESSAGE_CHARS:
        raise ValueError(
            f"The message is longer than {settings.REACH_MAX_MESSAGE_CHARS} characters."
        )
    if enforce_budget:
        try:
            budget_check(user=conversation.owner)
        except DailyBudgetExceeded as refused:
            # Outside any transaction of the refused message: the audit stays.
            audit_append(
                kind=AuditKind.BUDGET_DAILY_REFUSED,
                actor=conversation.owner,
                object_type="user",
                object_id=conversation.owner.get_username(),
                data=refused.status.as_json(),
            )
            raise
    with transaction.atomic():
        # Lock the conversation: one active task per conversation.
        conversation = _locked(conversation)
        active = conversation.tasks.filter(status__in=Task.ACTIVE).first()
        if active is not None:
            raise ConversationBusy(active)
        if conversation.tasks.filter(origin__isnull=False).exists():
            # An imported trace is a read-only record: nothing runs beside it.
            raise ConversationReadOnly(
                "This conversation holds an imported trace; it is read-only."
            )
        now = timezone.now()
        snapshot = agent_snapshot_of(conversation.agent, user=conversation.owner)
        if model:
            snapshot = snapshot.replace(model=model)
        snapshot = snapshot_priced(snapshot)
        route: Route | None = None
        if routed:
            snapshot, route = snapshot_routed(snapshot, content)
        else:
            snapshot = snapshot.replace(
                extra={k: v for k, v in snapshot.extra.items() if k != ROUTING_KEY}
            )
        taint = _history_taint(conversation)
        if parent is not None:
            for source in parent.tainted_by or []:
                if source not in taint:
                    taint.append(source)
        task = Task.objects.create(
            conversation=conversation,
            agent=conversation.agent,
            owner=conversation.owner,
            model=snapshot.model,
            goal=content,
            agent_snapshot=snapshot.to_json(),
            tainted_by=taint,
            inherited_taint=list(taint),
            parent=parent,
            parent_seq=parent_seq,
            eval_case=eval_case,
            # Unknown (null) for a model without a price: its steps add to null.
            cost_usd=0.0 if snapshot_price(snapshot.extra) is not None else None,
            intent=route.intent if route is not None else None,
            created_at=now,
            updated_at=now,
        )
        message_add(task=task, role=Message.Role.USER, content=content, at=now)
        if parent is None and (memory := ports.memory_for(task=task)) is not None:
            # What is remembered goes first, as a step; a tainted item taints the
            # run from its start (as taint inherited from earlier turns does).
            task.tainted_by = list(dict.fromkeys([*taint, *memory.tainted_by]))
            task.inherited_taint = list(task.tainted_by)
            task.save(update_fields=["tainted_by", "inherited_taint"])
            steps_insert(task=task, records=[memory])
        updates: dict[str, Any] = {"updated_at": now}
        if not conversation.title:
            updates["title"] = content[:80]
        Conversation.objects.filter(pk=conversation.pk).update(**updates)
        audit_task(
            AuditKind.TASK_STARTED,
            task_id=task.pk,
            actor=conversation.owner,
            data={"agent": conversation.agent.name, "model": task.model}
            | ({"intent": task.intent} if task.intent else {}),
        )
        enqueue_advance(task.pk)
        notify.task_changed_on_commit(task.pk)
    return task


def enqueue_advance(task_id: Any, *, countdown: float | None = None) -> None:
    """Enqueue ``advance`` once the current transaction commits."""

    def send() -> None:
        try:
            celery_tasks.advance.apply_async((str(task_id),), countdown=countdown)
        except Exception:  # noqa: BLE001 - the reaper re-queues it
            log.warning("enqueue of task %s failed; the reaper will retry", task_id)

    transaction.on_commit(send)


# -- cancelling --------------------------------------------------------------------


def task_cancel(*, task: Task, user: Any) -> Task:
    """Cancel a task: at once when idle, at the next step boundary when running."""
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task.pk)
        if task.status in FINAL_TASK_STATUSES:
            raise TaskFinal()
        now = timezone.now()
        task.cancel_requested = True
        fields = ["cancel_requested", "updated_at"]
        if task.status in (TaskStatus.QUEUED, TaskStatus.WAITING_APPROVAL) or (
            task.lease_expires_at is not None and task.lease_expires_at < now
        ):
            # Nobody drives it now: finish here.
            ports.approvals().cancel_for_task(task=task, by=user)
            _finish_task(task, StopReason.CANCELLED, answer=None, message=None)
            fields += [
                "status",
                "stop_reason",
                "finished_at",
                "error_message",
                "lease_owner",
                "lease_expires_at",
                "rev",
            ]
        task.updated_at = now
        task.save(update_fields=fields)
        audit_task(
            AuditKind.TASK_CANCEL_REQUESTED,
            task_id=task.pk,
            actor=user,
        )
        notify.task_changed_on_commit(task.pk)
    return task


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
    ports.task_finished(task=task)


def _max_cost_of(task: Task) -> float | None:
    """The cost budget the run had (read only when it stopped the run)."""
    recorded = Task.objects.filter(pk=task.pk).values_list("agent_snapshot", flat=True)
    snapshot = AgentSnapshot.from_json(recorded.first())
    return snapshot.limits.max_cost_usd if snapshot.limits is not None else None


def _reason_text(reason: StopReason) -> str:
    return {
        StopReason.CANCELLED: "Cancelled.",
    }.get(reason, f"Stopped ({reason.value}).")


# -- claiming ----------------------------------------------------------------------

#: SQLite has one writer at a time. A writer that finds the database locked waits
#: in SQLite's busy handler, which sleeps in coarse steps (up to 100 ms a try), so
#: under a hundred concurrent runs some writers starve for seconds. Within one
#: process, runs queue on this lock instead and get the write the moment it is
#: free. (PostgreSQL needs none of this: rows are locked, not the database.)
_sqlite_writes = threading.RLock()


@contextmanager
def _write_transaction() -> Iterator[None]:
    """``transaction.atomic()``, serialised within this process on SQLite."""
    if connection.vendor == "sqlite":
        with _sqlite_writes, transaction.atomic():
            yield
    else:
        with transaction.atomic():
            yield


def task_claim(*, task_id: Any, owner: str) -> int | None:
    """Take the lease of a runnable task; return the new epoch, or None."""
    now = timezone.now()
    waiting = Step.objects.filter(
        task=OuterRef("pk"), status=StepStatus.WAITING_APPROVAL
    )
    claimable = (
        Q(status=TaskStatus.QUEUED)
        | Q(status=TaskStatus.RUNNING, lease_expires_at__lt=now)
        | Q(status=TaskStatus.RUNNING, lease_expires_at__isnull=True)
        | (Q(status=TaskStatus.WAITING_APPROVAL) & ~Exists(waiting))
    )
    with _sqlite_writes if connection.vendor == "sqlite" else nullcontext():
        # Most claims are of a fresh task: that one statement returns the epoch.
        epoch = _claim_queued(task_id, owner, now)
        if epoch is None and _claim_update(claimable, task_id, owner, now) == 1:
            row = (
                Task.objects.filter(pk=task_id)
                .values("lease_epoch", "lease_owner")
                .first()
            )
            if row is not None and row["lease_owner"] == owner:
                epoch = int(row["lease_epoch"])
    if epoch is None:
        return None
    notify.task_changed_on_commit(task_id)
    return epoch


def _claim_queued(task_id: Any, owner: str, now: Any) -> int | None:
    """The claim of a queued task (not an imported trace) in one UPDATE that
    returns the new epoch: what :func:`_claim_update` does for that case, and
    the row read it needs after it."""
    field = Task._meta.get_field
    params = [
        TaskStatus.RUNNING.value,
        owner,
        field("lease_expires_at").get_db_prep_save(
            now + timedelta(seconds=settings.REACH_LEASE_S), connection
        ),
        field("started_at").get_db_prep_save(now, connection),
        field("updated_at").get_db_prep_save(now, connection),
        _task_pk_param(task_id),
        TaskStatus.QUEUED.value,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_claim_queued_sql(), params)
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def _claim_update(claimable: Q, task_id: Any, owner: str, now: Any) -> int:
    return (
        # Imported traces (origin set) are records, never runs.
        Task.objects.filter(claimable, pk=task_id, origin__isnull=True).update(
            status=TaskStatus.RUNNING,
            lease_owner=owner,
            lease_epoch=F("lease_epoch") + 1,
            lease_expires_at=now + timedelta(seconds=settings.REACH_LEASE_S),
            started_at=Coalesce("started_at", now),
            updated_at=now,
            rev=F("rev") + 1,
        )
    )


class _Heartbeat:
    """One thread per process extends the leases of the runs it drives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[str, int]] = {}
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def add(self, task_id: str, owner: str, epoch: int) -> None:
        with self._lock:
            self._runs[task_id] = (owner, epoch)
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="reach-heartbeat", daemon=True
                )
                self._thread.start()

    def remove(self, task_id: str) -> None:
        with self._lock:
            self._runs.pop(task_id, None)

    def _loop(self) -> None:
        while True:
            time.sleep(settings.REACH_HEARTBEAT_S)
            with self._lock:
                runs = dict(self._runs)
            if not runs:
                continue
            try:
                close_old_connections()
                expires = timezone.now() + timedelta(seconds=settings.REACH_LEASE_S)
                with _write_transaction():
                    for task_id, (owner, epoch) in runs.items():
                        Task.objects.filter(
                            pk=task_id, lease_owner=owner, lease_epoch=epoch
                        ).update(lease_expires_at=expires)
            except Exception:  # noqa: BLE001 - next beat tries again
                log.warning("lease heartbeat failed", exc_info=True)
            finally:
                # Hold no connection between beats (a pool or the server keeps it).
                connection.close()


_heartbeat = _Heartbeat()


# -- writing steps -----------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """Who drives a run, under which epoch: the fence on every write of that run."""

    owner: str
    epoch: int


def steps_insert(
    *, task: Task, records: Sequence[StepRecord], lease: Lease | None = None
) -> list[Step]:
    """Write new steps of ``task``: the one way a step is first written.

    One UPDATE bumps the task's rev (one per step: the steps take those revs in
    order), its token counters and its step count, then one INSERT writes the
    steps, redacted and clipped (:func:`_stored`). A step that waits for approval
    opens its request; the task's watchers are told after commit.

    Runs inside the caller's transaction. With a ``lease`` the bump is fenced by
    it (:class:`LeaseLost` when another worker took the run over); without one
    the caller holds the task row's lock. ``task.rev`` is kept up to date.
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
            with_task=any(r.kind == StepKind.MODEL_CALL for r in records),
        )
    counters.count_steps_on_commit(task, rows)
    return rows


def step_transition(
    *,
    task: Task,
    step: Step,
    lease: Lease | None = None,
    with_task: bool = False,
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
    rev back.

    The journal calls this twice per tool call, so it is raw SQL: the bump, the
    rev read back and the step's UPDATE, the statements the ORM would send
    without its cost per query (ten times the query's own).
    """
    _require_transaction("step_transition")
    for name, value in changes.items():
        setattr(step, name, value)
    now = timezone.now()
    step.rev = _bump(task, lease, now)
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
) -> int:
    """Bump the task's rev by ``count`` (and its token, step, cost and estimate
    counters) and set its ``updated_at`` to ``now``, in one statement; return the
    new rev. A task whose cost is unknown (null) stays unknown: null plus a cost
    is null in SQL.

    With a lease the UPDATE is the fence: it matches only under the same owner
    and epoch while the run is running. Either way it locks the row (PostgreSQL)
    inside the transaction that SQLite's IMMEDIATE mode already holds, so the
    counters it returns are ours; they are set on ``task``, and so is its
    ``cancel_requested`` as of the write (the journal's next control check may
    answer from it).
    """
    param = _task_pk_param(task.pk)
    updated_at = Task._meta.get_field("updated_at").get_db_prep_save(now, connection)
    params = [count, *usage, steps, cost, estimated, updated_at, param]
    if lease is not None:
        params += [lease.owner, lease.epoch, TaskStatus.RUNNING.value]
    with connection.cursor() as cursor:
        cursor.execute(_bump_sql(lease is not None), params)
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
    return task.rev


#: The task's counters a bump adds to and returns, in order.
_BUMPED = (
    "rev",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "step_count",
    "cost_usd",
    "estimated_calls",
)


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

    # reading

    def snapshot(self) -> RunSnapshot:
        task = Task.objects.only(*_SNAPSHOT_FIELDS).get(pk=self._task_pk)
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
        """One fenced UPDATE of the task's counters, one INSERT of the steps."""
        with _write_transaction():
            rows = steps_insert(task=self._task, records=steps, lease=self._lease)
            self._step_pks.update((row.seq, row.pk) for row in rows)
        self._written_at = time.monotonic()
        if self._task.intent and current_intent.get() != self._task.intent:
            # The routing call chose: the run's later log lines carry it.
            current_intent.set(self._task.intent)
        return [row.record() for row in rows]

    def update(self, step: StepRecord) -> StepRecord:
        """One fenced UPDATE of the task (its rev), one UPDATE of the step."""
        with _write_transaction():
            row = Step(task_id=self._task_pk, seq=step.seq, rev=self._task.rev)
            row.apply(_stored(step))
            row.pk = self._step_pk(step.seq)
            tainted = False
            detail = StepDetail(step.detail)
            if detail.untrusted and step.status in (
                StepStatus.SUCCEEDED,
                StepStatus.CACHED,
            ):
                task = Task.objects.only("tainted_by").get(pk=self._task_pk)
                label = taint_label(step.tool, step.seq, str(self._task_pk))
                if label not in (task.tainted_by or []):
                    task.tainted_by = [*(task.tainted_by or []), label]
                    task.save(update_fields=["tainted_by"])
                    tainted = True
                # What this run's task events show, this write's included.
                self._task.tainted_by = task.tainted_by
            step_transition(
                task=self._task, step=row, lease=self._lease, with_task=tainted
            )
        self._written_at = time.monotonic()
        return row.record()

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
        return True

    def finish(
        self, reason: StopReason, *, answer: str | None, message: str | None
    ) -> None:
        with _write_transaction():
            task = self._locked_task()
            if reason is StopReason.CANCELLED:
                ports.approvals().cancel_for_task(task=task)
                self._skip_open_steps(task)
            task.active_seconds = self.active_seconds()
            _finish_task(task, reason, answer=answer, message=message)
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


# Raw SQL of the per-step path: identifiers come from model metadata, every value
# is a parameter, each value prepared by its field exactly as the ORM does it.


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _task_pk_param(pk: Any) -> Any:
    return Task._meta.get_field("id").get_db_prep_value(pk, connection)


@functools.cache
def _control_sql() -> str:
    names = ("lease_owner", "lease_epoch", "cancel_requested", "status")
    columns = ", ".join(_q(name) for name in names)
    table = _q(Task._meta.db_table)
    return f"SELECT {columns} FROM {table} WHERE {_q('id')} = %s"  # noqa: S608


@functools.cache
def _claim_queued_sql() -> str:
    table = _q(Task._meta.db_table)
    return (
        f"UPDATE {table} SET {_q('status')} = %s, {_q('lease_owner')} = %s, "  # noqa: S608
        f"{_q('lease_epoch')} = {_q('lease_epoch')} + 1, "
        f"{_q('lease_expires_at')} = %s, "
        f"{_q('started_at')} = COALESCE({_q('started_at')}, %s), "
        f"{_q('updated_at')} = %s, {_q('rev')} = {_q('rev')} + 1 "
        f"WHERE {_q('id')} = %s AND {_q('origin')} IS NULL AND {_q('status')} = %s "
        f"RETURNING {_q('lease_epoch')}"
    )


@functools.cache
def _bump_sql(fenced: bool) -> str:
    counters = ", ".join(f"{_q(name)} = {_q(name)} + %s" for name in _BUMPED)
    fence = (
        f" AND {_q('lease_owner')} = %s AND {_q('lease_epoch')} = %s "
        f"AND {_q('status')} = %s"
        if fenced
        else ""
    )
    returning = ", ".join(_q(name) for name in (*_BUMPED, "cancel_requested"))
    return (
        f"UPDATE {_q(Task._meta.db_table)} SET {counters}, "  # noqa: S608
        f"{_q('updated_at')} = %s WHERE {_q('id')} = %s{fence} RETURNING {returning}"
    )


@functools.cache
def _step_insert_fields() -> tuple[Any, ...]:
    """Every column of a step but its id, in the INSERT's order."""
    names = ("task", "seq", "rev", *Step.RECORD_FIELDS)
    fields = tuple(Step._meta.get_field(name) for name in names)
    columns = {f.column for f in Step._meta.concrete_fields if not f.primary_key}
    # A column the record does not carry would be left to its (missing) default.
    missing = columns - {f.column for f in fields}
    assert not missing, f"steps_insert writes no {sorted(missing)}"
    return fields


def _insert_steps(rows: Sequence[Step]) -> None:
    """One INSERT of ``rows`` with their ids back (``RETURNING``, in the rows'
    order, as ``bulk_create`` relies on too); the ORM's bulk_create costs
    several times the statement on this path, twice per step."""
    db = connections[DEFAULT_DB_ALIAS]
    params = [
        value for row in rows for value in _prepared(_step_insert_fields(), row, db)
    ]
    with db.cursor() as cursor:
        cursor.execute(_step_insert_sql(len(rows)), params)
        ids = [row[0] for row in cursor.fetchall()]
    for row, pk in zip(rows, ids, strict=True):
        row.pk = pk
        row._state.adding = False
        row._state.db = db.alias


def _prepared(fields: Sequence[Any], row: Step, db: Any) -> list[Any]:
    """``row``'s values of ``fields``, each prepared by its field as the ORM does."""
    return [f.get_db_prep_save(getattr(row, f.attname), db) for f in fields]


@functools.cache
def _step_insert_sql(count: int) -> str:
    fields = _step_insert_fields()
    columns = ", ".join(_q(f.column) for f in fields)
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return (
        f"INSERT INTO {_q(Step._meta.db_table)} ({columns}) "  # noqa: S608
        f"VALUES {', '.join([one] * count)} RETURNING {_q('id')}"
    )


@functools.cache
def _step_update_fields() -> tuple[Any, ...]:
    return tuple(Step._meta.get_field(name) for name in (*Step.RECORD_FIELDS, "rev"))


@functools.cache
def _step_update_statement() -> str:
    assignments = ", ".join(f"{_q(f.column)} = %s" for f in _step_update_fields())
    table = _q(Step._meta.db_table)
    return f"UPDATE {table} SET {assignments} WHERE {_q('id')} = %s"  # noqa: S608


def _step_update_sql(row: Step) -> tuple[str, list[Any]]:
    """The UPDATE the ORM would send for every recorded field of ``row``."""
    values = _prepared(_step_update_fields(), row, connections[DEFAULT_DB_ALIAS])
    return _step_update_statement(), [*values, row.pk]


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


# -- advancing ---------------------------------------------------------------------


def task_advance(*, task_id: Any) -> str:
    """Claim the task and drive it until it finishes, parks or loses its lease."""
    owner = f"{WORKER_ID}:{uuid.uuid4().hex[:8]}"
    epoch = task_claim(task_id=task_id, owner=owner)
    if epoch is None:
        return "not-claimed"
    token = current_task_id.set(str(task_id))
    task = Task.objects.select_related("agent", "owner").get(pk=task_id)
    intent_token = current_intent.set(task.intent)
    journal = DjangoJournal(task, owner=owner, epoch=epoch)
    _heartbeat.add(str(task.pk), owner, epoch)
    try:
        engine = build_engine(task)
        outcome = engine.advance(journal)
        return outcome.value
    except LeaseLost:
        log.info("lease of task %s was taken over; stopping", task_id)
        return "lease-lost"
    except (OperationalError, InterfaceError):
        # The database connection went away mid-run: not the run's fault. Drop
        # the connection and let the run go on from its last committed step
        # (another claim after the lease, or the reaper).
        log.warning("task %s lost its database connection; retrying", task_id)
        connection.close()
        with contextlib.suppress(OperationalError, InterfaceError):
            Task.objects.filter(
                pk=task_id, lease_owner=owner, lease_epoch=epoch
            ).update(lease_expires_at=timezone.now())
            enqueue_advance(task_id, countdown=1)
        return "database-lost"
    except Exception as exc:  # noqa: BLE001 - record, never leave it running
        log.exception("task %s failed with an internal error", task_id)
        with contextlib.suppress(LeaseLost):
            journal.finish(
                StopReason.INTERNAL_ERROR,
                answer=None,
                message=f"Internal error: {exc.__class__.__name__}: {exc}"[:1000],
            )
        return "internal-error"
    finally:
        _heartbeat.remove(str(task.pk))
        current_intent.reset(intent_token)
        current_task_id.reset(token)


def build_engine(task: Task) -> Engine:
    snapshot = AgentSnapshot.from_json(task.agent_snapshot)
    toolbox = toolbox_for_snapshot(snapshot)
    if (case := EvalCase.from_json(task.eval_case)) is not None:
        # An evaluation changes nothing: writes answer with the case's stand-ins.
        toolbox = eval_toolbox(toolbox, case)
    # A plugged provider answers some runs itself (the MCP gateway's one-call runs).
    client: ModelClient | None = ports.model_for(snapshot=snapshot)
    routing: Routing | None = None
    if client is None and ROUTE_KEY not in snapshot.extra:
        # No rule chose when it started: its first step asks the model.
        routing = Routing.from_json(snapshot.extra.get(ROUTING_KEY))
    if client is None:
        try:
            client = runtime.model_client()
        except ModelError as exc:
            # No endpoint configured (or none that parses): the run still goes
            # through its loop and ends as a model_error with the reason, like a
            # run whose endpoint is down, not as an internal error before its
            # first step.
            client = UnavailableModel(exc)
    return Engine(
        model_client=client,
        toolbox=toolbox,
        executor=runtime.executor(),
        limits=run_limits(task, snapshot=snapshot),
        redactor=runtime.redactor(),
        model_pool=runtime.model_pool(),
        price=snapshot_price(snapshot.extra),
        routing=routing,
    )


def run_limits(task: Task, *, snapshot: AgentSnapshot | None = None) -> Limits:
    """The limits the run had (its agent snapshot), else its agent's current ones."""
    snapshot = snapshot or AgentSnapshot.from_json(task.agent_snapshot)
    if snapshot.limits is not None:
        return snapshot.limits
    limits: Limits = task.agent.limits()
    return limits


# -- reaping -----------------------------------------------------------------------


def tasks_reap() -> list[str]:
    """Re-queue runs whose lease expired and queued runs whose enqueue was lost."""
    now = timezone.now()
    grace = now - timedelta(seconds=settings.REACH_QUEUED_GRACE_S)
    waiting = Step.objects.filter(
        task=OuterRef("pk"), status=StepStatus.WAITING_APPROVAL
    )
    stale = (
        Task.objects.filter(origin__isnull=True)
        .filter(
            Q(status=TaskStatus.RUNNING, lease_expires_at__lt=now)
            | Q(status=TaskStatus.QUEUED, updated_at__lt=grace)
            | (
                Q(status=TaskStatus.WAITING_APPROVAL, updated_at__lt=grace)
                & ~Exists(waiting)
            )
        )
        .values_list("pk", flat=True)[:500]
    )
    ids = [str(pk) for pk in stale]
    for task_id in ids:
        try:
            celery_tasks.advance.apply_async((task_id,))
        except Exception:  # noqa: BLE001
            log.warning("re-queue of %s failed", task_id)
    if ids:
        Task.objects.filter(pk__in=ids, status=TaskStatus.QUEUED).update(updated_at=now)
    return ids


def outcome_is_final(task: Task) -> bool:
    return task.status in FINAL_TASK_STATUSES


__all__ = [
    "ConversationBusy",
    "ConversationReadOnly",
    "DjangoJournal",
    "Lease",
    "Outcome",
    "TaskFinal",
    "conversation_create",
    "enqueue_advance",
    "run_history",
    "run_limits",
    "step_transition",
    "steps_insert",
    "task_advance",
    "task_cancel",
    "task_claim",
    "task_start",
    "tasks_reap",
]
