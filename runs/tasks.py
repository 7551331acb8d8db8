"""The worker's side of a run: the Celery tasks and the driver they run.

``advance`` is a thin shell over :func:`task_advance`: claim the run under a lease
(:mod:`runs.leases`), build its engine (:func:`build_engine`, its limits from
:func:`run_limits`) and drive it through the journal (:mod:`runs.journal`) until
it finishes, parks or loses its lease. ``reap`` is a thin shell over
:func:`tasks_reap`, which re-queues runs whose lease expired and queued runs
whose enqueue was lost. :func:`enqueue_advance` sends ``advance`` once the
current transaction commits. They live in one module because the driver
enqueues the task that runs it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import uuid
from datetime import timedelta
from enum import StrEnum
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from engine.evaluation import EvalCase, eval_toolbox
from engine.guards import GUARDRAILS_KEY
from engine.journal import LeaseLost, Outcome
from engine.loop import Engine
from engine.model_client import ModelClient, ModelError, UnavailableModel
from engine.pricing import snapshot_price
from engine.routing import ROUTE_KEY, ROUTING_KEY, Routing
from engine.spec import AgentSnapshot, Limits, StepStatus, StopReason, TaskStatus
from infra import runtime
from infra.logging import current_intent, current_task_id
from registry.handoffs import RegistryHandoffs
from registry.services import toolbox_for_snapshot
from runs import ports
from runs.journal import DjangoJournal
from runs.leases import _heartbeat, recover_connections, task_claim
from runs.models import Step, Task
from runs.streaming import LiveReply

log = logging.getLogger(__name__)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


class AdvanceResult(StrEnum):
    """What one :func:`task_advance` came to (the ``advance`` task's result)."""

    #: The engine's outcomes (:class:`engine.journal.Outcome`).
    FINISHED = Outcome.FINISHED.value
    PARKED = Outcome.PARKED.value
    #: Another worker holds the run, or it is final: nothing was done.
    NOT_CLAIMED = "not-claimed"
    #: Another worker took the lease over mid-run; this one stopped.
    LEASE_LOST = "lease-lost"
    #: The database connection went away; the run goes on from its last step.
    DATABASE_LOST = "database-lost"
    #: An unexpected error: the run was finished as an internal error.
    INTERNAL_ERROR = "internal-error"


@shared_task(name="agents.advance", acks_late=True, reject_on_worker_lost=True)
def advance(task_id: str) -> str:
    return task_advance(task_id=task_id).value


@shared_task(name="agents.reap")
def reap() -> int:
    return len(tasks_reap())


def enqueue_advance(task_id: Any, *, countdown: float | None = None) -> None:
    """Enqueue ``advance`` once the current transaction commits."""

    def send() -> None:
        try:
            advance.apply_async((str(task_id),), countdown=countdown)
        except Exception:  # noqa: BLE001 - the reaper re-queues it
            log.warning("enqueue of task %s failed; the reaper will retry", task_id)

    transaction.on_commit(send)


# -- advancing ---------------------------------------------------------------------


def task_advance(*, task_id: Any) -> AdvanceResult:
    """Claim the task and drive it until it finishes, parks or loses its lease."""
    owner = f"{WORKER_ID}:{uuid.uuid4().hex[:8]}"
    epoch = task_claim(task_id=task_id, owner=owner)
    if epoch is None:
        return AdvanceResult.NOT_CLAIMED
    token = current_task_id.set(str(task_id))
    task = Task.objects.select_related("agent", "owner").get(pk=task_id)
    intent_token = current_intent.set(task.intent)
    journal = DjangoJournal(task, owner=owner, epoch=epoch)
    _heartbeat.add(str(task.pk), owner, epoch)
    try:
        engine = build_engine(task)
        outcome = engine.advance(journal)
        return AdvanceResult(outcome.value)
    except LeaseLost:
        log.info("lease of task %s was taken over; stopping", task_id)
        return AdvanceResult.LEASE_LOST
    except (OperationalError, InterfaceError):
        # The database connection went away mid-run: not the run's fault. Drop
        # the connection and let the run go on from its last committed step
        # (another claim after the lease, or the reaper).
        log.warning("task %s lost its database connection; retrying", task_id)
        recover_connections()
        # No beat extends the lease after this: its end below stays written.
        _heartbeat.release(str(task_id))
        with contextlib.suppress(OperationalError, InterfaceError):
            Task.objects.filter(
                pk=task_id, lease_owner=owner, lease_epoch=epoch
            ).update(lease_expires_at=timezone.now())
            enqueue_advance(task_id, countdown=1)
        return AdvanceResult.DATABASE_LOST
    except Exception as exc:  # noqa: BLE001 - record, never leave it running
        log.exception("task %s failed with an internal error", task_id)
        with contextlib.suppress(LeaseLost):
            journal.finish(
                StopReason.INTERNAL_ERROR,
                answer=None,
                message=f"Internal error: {exc.__class__.__name__}: {exc}"[:1000],
            )
        return AdvanceResult.INTERNAL_ERROR
    finally:
        _heartbeat.remove(str(task.pk))
        current_intent.reset(intent_token)
        current_task_id.reset(token)


def build_engine(task: Task) -> Engine:
    snapshot = AgentSnapshot.from_json(task.agent_snapshot)
    toolbox = toolbox_for_snapshot(snapshot)
    case = EvalCase.from_json(task.eval_case) if task.eval_case is not None else None
    if case is not None:
        # An evaluation changes nothing: writes answer with the case's stand-ins.
        toolbox = eval_toolbox(toolbox, case)
    # The slot's provider answers some runs itself (the MCP gateway's one-call runs).
    client: ModelClient | None = (
        ports.model_for()(snapshot=snapshot)
        if ports.GATEWAY_KEY in snapshot.extra
        else None
    )
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
    redactor = runtime.redactor()
    return Engine(
        model_client=client,
        toolbox=toolbox,
        executor=runtime.executor(),
        limits=run_limits(task, snapshot=snapshot),
        redactor=redactor,
        model_pool=runtime.model_pool(),
        price=snapshot_price(snapshot.extra),
        routing=routing,
        read_window_s=settings.REACH_READ_WINDOW_MS / 1000,
        poll_interval_s=settings.REACH_CANCEL_POLL_MS / 1000,
        agent=snapshot,
        # The reply pushed to the task's watchers while it is written.
        reply_watcher=LiveReply(
            task.pk,
            window_s=settings.REACH_STREAM_COALESCE_MS / 1000,
            rev=lambda: task.rev,
            redactor=redactor,
        ),
        # None (nothing asked of the slot) when the snapshot records none.
        guards=ports.guards_for()(snapshot=snapshot, task_id=str(task.pk))
        if GUARDRAILS_KEY in snapshot.extra
        else None,
        # Made only when the run first hands off (or follows a handoff).
        handoffs=functools.partial(
            RegistryHandoffs,
            task_id=task.pk,
            user=task.owner,
            goal=task.goal,
            wrap=functools.partial(eval_toolbox, case=case)
            if case is not None
            else None,
        ),
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
            advance.apply_async((task_id,))
        except Exception:  # noqa: BLE001
            log.warning("re-queue of %s failed", task_id)
    if ids:
        # A re-queued idle run (queued, or parked with its decision made) waits
        # the grace again before the next tick sends it once more.
        Task.objects.filter(
            pk__in=ids, status__in=(TaskStatus.QUEUED, TaskStatus.WAITING_APPROVAL)
        ).update(updated_at=now)
    return ids


__all__ = [
    "AdvanceResult",
    "enqueue_advance",
    "run_limits",
    "task_advance",
    "tasks_reap",
]
