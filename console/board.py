"""What the console shows: runs by state with their age, the workers, the queue.

One presenter (:func:`console_board`) read by the page and by its live refresh,
so both render the same partial. Everything is read where it lives: tasks and
their leases from the database (a lease's last extension is its heartbeat), the
workers' own heartbeats and the broker's queue from Redis.

A run's state here is the operator's view of it:

- running: a worker holds a live lease (its owner, last heartbeat, current step);
- queued: waiting for a worker for longer than ``QUEUED_AFTER_S``;
- parked: waiting on an approval (since when, until when);
- stuck: running under a lease that expired (its worker died or hangs), or
  waiting on nothing — what the reaper re-queues; the console can re-queue it now;
- failed: ended ``failed`` in the last ``FAILED_WITHIN``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis
from django.conf import settings
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.utils import timezone

from approvals.models import ApprovalRequest
from infra.runtime import redis_client
from runs.models import Step, Task

log = logging.getLogger(__name__)

#: A queued run is shown once it has waited this long (seconds).
QUEUED_AFTER_S = 60
#: Failed runs of this window are shown.
FAILED_WITHIN = dt.timedelta(days=1)
#: Rows per state at most (the oldest first: those are the ones to act on).
MAX_ROWS = 200
#: Where the workers announce themselves (``reach_site.celery`` writes the keys,
#: each holding the Unix time of its last beat, expiring when the worker stops).
WORKER_KEY_PREFIX = "reach:worker:"


class RunState(StrEnum):
    """Where a run stands on the board (one section each)."""

    RUNNING = "running"
    QUEUED = "queued"
    PARKED = "parked"
    STUCK = "stuck"
    FAILED = "failed"


@dataclass
class CurrentStep:
    seq: int
    kind: str
    tool: str | None
    status: str

    @property
    def label(self) -> str:
        return f"#{self.seq} {self.tool or self.kind.replace('_', ' ')} ({self.status})"


@dataclass
class RunRow:
    """One run as the console lists it."""

    task: Task
    state: str
    #: Since when it has been in this state.
    since: dt.datetime | None
    heartbeat_at: dt.datetime | None = None
    current: CurrentStep | None = None
    #: Parked: the oldest pending request's tool and its deadline.
    waiting_tool: str = ""
    expires_at: dt.datetime | None = None
    #: Failed: the steps a retry may start from (seq, label), last first.
    retry_from: list[tuple[int, str]] = field(default_factory=list)

    @property
    def lease_process(self) -> str:
        """The worker process of the lease (``host:pid``; the owner without its
        per-claim suffix)."""
        return self.task.lease_owner.rsplit(":", 1)[0] if self.task.lease_owner else ""

    @property
    def can_cancel(self) -> bool:
        return self.state != RunState.FAILED

    @property
    def can_requeue(self) -> bool:
        return self.state in (RunState.STUCK, RunState.QUEUED)


@dataclass
class WorkerRow:
    """A worker (by its own heartbeat) or a process holding leases without one."""

    name: str
    host: str
    heartbeat_at: dt.datetime | None
    runs: list[RunRow] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.heartbeat_at is not None


@dataclass
class Board:
    now: dt.datetime
    running: list[RunRow]
    queued: list[RunRow]
    parked: list[RunRow]
    stuck: list[RunRow]
    failed: list[RunRow]
    workers: list[WorkerRow]
    #: Messages in the broker's queue; None when Redis does not answer.
    broker_depth: int | None
    #: Tasks in the database waiting for a worker (however briefly).
    queued_total: int
    redis_error: str = ""

    @property
    def sections(self) -> list[tuple[str, str, list[RunRow]]]:
        """(state, heading, rows), in the order the page shows them."""
        return [
            (RunState.STUCK, "Stuck: lease expired, not picked up again", self.stuck),
            (RunState.RUNNING, "Running", self.running),
            (
                RunState.QUEUED,
                f"Queued for more than {QUEUED_AFTER_S} s",
                self.queued,
            ),
            (RunState.PARKED, "Parked on an approval", self.parked),
            (RunState.FAILED, "Failed in the last day", self.failed),
        ]

    @property
    def alive_workers(self) -> int:
        return sum(1 for worker in self.workers if worker.alive)

    @property
    def silent_workers(self) -> int:
        return sum(1 for worker in self.workers if not worker.alive)


def _runs() -> QuerySet[Task]:
    """Live runs (imported traces are records, never runs), with what rows show."""
    return (
        Task.objects.filter(origin__isnull=True)
        .select_related("owner", "agent")
        .defer("agent_snapshot", "eval_case")
    )


def _with_current_step(rows: QuerySet[Task]) -> QuerySet[Task]:
    latest = Step.objects.filter(task=OuterRef("pk")).order_by("-seq")
    return rows.annotate(
        current_seq=Subquery(latest.values("seq")[:1]),
        current_kind=Subquery(latest.values("kind")[:1]),
        current_tool=Subquery(latest.values("tool")[:1]),
        current_status=Subquery(latest.values("status")[:1]),
    )


def _current(task: Any) -> CurrentStep | None:
    if getattr(task, "current_seq", None) is None:
        return None
    return CurrentStep(
        task.current_seq, task.current_kind, task.current_tool, task.current_status
    )


def _heartbeat(task: Task) -> dt.datetime | None:
    """When the lease was last extended: a claim or a beat sets it to now + lease."""
    if task.lease_expires_at is None:
        return None
    return task.lease_expires_at - dt.timedelta(seconds=settings.REACH_LEASE_S)


def waiting_steps() -> QuerySet[Step]:
    return Step.objects.filter(task=OuterRef("pk"), status=Step.Status.WAITING_APPROVAL)


def stuck_runs(now: dt.datetime) -> QuerySet[Task]:
    """Running under an expired (or no) lease, or waiting on nothing for longer
    than the reaper's grace: the runs nobody drives."""
    grace = now - dt.timedelta(seconds=settings.REACH_QUEUED_GRACE_S)
    return _runs().filter(
        Q(status=Task.Status.RUNNING, lease_expires_at__lt=now)
        | Q(status=Task.Status.RUNNING, lease_expires_at__isnull=True)
        | (
            Q(status=Task.Status.WAITING_APPROVAL, updated_at__lt=grace)
            & ~Exists(waiting_steps())
        )
    )


def long_queued_runs(now: dt.datetime) -> QuerySet[Task]:
    """Queued for longer than ``QUEUED_AFTER_S``: since it was created, or since it
    was last put back in the queue (a decided approval, a re-queue)."""
    cutoff = now - dt.timedelta(seconds=QUEUED_AFTER_S)
    return _runs().filter(
        Q(status=Task.Status.QUEUED)
        & (
            Q(started_at__isnull=True, created_at__lt=cutoff)
            | Q(started_at__isnull=False, updated_at__lt=cutoff)
        )
    )


def _queued_since(task: Task) -> dt.datetime:
    return task.created_at if task.started_at is None else task.updated_at


def console_board(*, now: dt.datetime | None = None) -> Board:
    """Everything the console shows, read now."""
    now = now or timezone.now()
    running = [
        RunRow(
            task=t,
            state=RunState.RUNNING,
            since=t.started_at,
            heartbeat_at=_heartbeat(t),
            current=_current(t),
        )
        for t in _with_current_step(
            _runs().filter(status=Task.Status.RUNNING, lease_expires_at__gte=now)
        ).order_by("started_at")[:MAX_ROWS]
    ]
    stuck = [
        RunRow(
            task=t,
            state=RunState.STUCK,
            since=t.lease_expires_at or t.updated_at,
            heartbeat_at=_heartbeat(t),
            current=_current(t),
        )
        for t in _with_current_step(stuck_runs(now)).order_by("updated_at")[:MAX_ROWS]
    ]
    queued = sorted(
        (
            RunRow(task=t, state=RunState.QUEUED, since=_queued_since(t))
            for t in long_queued_runs(now).order_by("created_at")[:MAX_ROWS]
        ),
        key=lambda row: row.since or now,
    )
    parked = _parked()
    failed = _failed(now)
    broker_depth: int | None = None
    beats: dict[str, dt.datetime] = {}
    redis_error = ""
    try:
        client = redis_client()
        broker_depth = int(client.llen(settings.CELERY_TASK_DEFAULT_QUEUE))
        beats = _worker_beats(client)
    except redis.RedisError as exc:
        log.warning("console: Redis unavailable", exc_info=True)
        redis_error = f"Redis does not answer ({exc.__class__.__name__})."
    return Board(
        now=now,
        running=running,
        queued=queued,
        parked=parked,
        stuck=stuck,
        failed=failed,
        workers=_workers(beats, [*running, *stuck]),
        broker_depth=broker_depth,
        queued_total=Task.objects.filter(status=Task.Status.QUEUED).count(),
        redis_error=redis_error,
    )


def _parked() -> list[RunRow]:
    pending = ApprovalRequest.objects.filter(
        task=OuterRef("pk"), status=ApprovalRequest.Status.PENDING
    ).order_by("requested_at")
    rows = (
        _runs()
        .filter(status=Task.Status.WAITING_APPROVAL)
        .filter(Exists(waiting_steps()))
        .annotate(
            waiting_since=Subquery(pending.values("requested_at")[:1]),
            waiting_tool=Subquery(pending.values("tool")[:1]),
            waiting_expires=Subquery(pending.values("expires_at")[:1]),
        )
        .order_by("updated_at")[:MAX_ROWS]
    )
    return sorted(
        (
            RunRow(
                task=t,
                state=RunState.PARKED,
                since=t.waiting_since or t.updated_at,
                waiting_tool=t.waiting_tool or "",
                expires_at=t.waiting_expires,
            )
            for t in rows
        ),
        key=lambda row: row.since or row.task.updated_at,
    )


def _failed(now: dt.datetime) -> list[RunRow]:
    calls = Step.objects.filter(
        kind__in=[Step.Kind.MODEL_CALL, Step.Kind.TOOL_CALL]
    ).only("task_id", "seq", "kind", "tool", "status")
    rows = (
        _runs()
        .filter(status=Task.Status.FAILED, finished_at__gte=now - FAILED_WITHIN)
        .prefetch_related(Prefetch("steps", queryset=calls.order_by("-seq")))
        .order_by("-finished_at")[:MAX_ROWS]
    )
    return [
        RunRow(
            task=t,
            state=RunState.FAILED,
            since=t.finished_at,
            retry_from=[
                (s.seq, f"#{s.seq} {s.tool or s.kind.replace('_', ' ')} ({s.status})")
                for s in t.steps.all()
            ],
        )
        for t in rows
    ]


def _worker_beats(client: redis.Redis) -> dict[str, dt.datetime]:
    beats: dict[str, dt.datetime] = {}
    # SCAN, not KEYS: KEYS blocks a busy production Redis.
    for key in client.scan_iter(match=WORKER_KEY_PREFIX + "*", count=100):
        name = (key.decode() if isinstance(key, bytes) else str(key))[
            len(WORKER_KEY_PREFIX) :
        ]
        raw = client.get(key)
        try:
            at = dt.datetime.fromtimestamp(float(raw or 0), tz=dt.UTC)
        except (TypeError, ValueError):
            continue
        beats[name] = at
    return beats


def _host(worker: str) -> str:
    """A Celery worker's host (``celery@host`` names it after the ``@``)."""
    return worker.rsplit("@", 1)[-1]


def _workers(beats: dict[str, dt.datetime], rows: Iterable[RunRow]) -> list[WorkerRow]:
    """The workers that beat, each with the runs leased on its host; then the
    processes holding leases with no beating worker on their host."""
    workers = [
        WorkerRow(name=name, host=_host(name), heartbeat_at=at)
        for name, at in sorted(beats.items())
    ]
    by_host = {w.host: w for w in workers}
    orphans: dict[str, WorkerRow] = {}
    for row in rows:
        process = row.lease_process
        if not process:
            continue
        host = process.split(":", 1)[0]
        worker = by_host.get(host)
        if worker is None:
            worker = orphans.setdefault(
                process, WorkerRow(name=process, host=host, heartbeat_at=None)
            )
        worker.runs.append(row)
    return [*workers, *orphans.values()]
