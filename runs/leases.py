"""Leases: who drives a run, under which epoch.

A run is claimed with a guarded UPDATE that bumps its lease epoch
(:func:`task_claim`); every later write of that run is conditional on the same
owner and epoch (the :class:`Lease` the step writes and the journal carry), so a
worker whose lease was taken over stops instead of writing beside the new owner.
One heartbeat thread per process extends the leases it holds; on SQLite the
writes of a process are serialised (:func:`_write_transaction`). After a dropped
database connection, :func:`recover_connections` replaces the dead ones.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from engine.spec import StepStatus, TaskStatus
from runs import events as notify
from runs.models import Step, Task
from runs.sql import _claim_queued_sql, _task_pk_param

log = logging.getLogger(__name__)

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


def recover_connections() -> None:
    """After a dropped database connection: close this thread's, and have the
    pool test its idle ones.

    psycopg_pool hands out an idle connection without knowing that the server
    closed it (a failover, a restart, ``pg_terminate_backend``). With
    ``CONN_HEALTH_CHECKS`` each dead one it hands out is checked, discarded and
    followed by a backoff sleep (1 s, 2 s, 4 s...), so with a few dead
    connections idle the next caller waits out the pool's whole timeout before
    reaching a live one. ``check()`` tests every idle connection at once and
    replaces the dead ones (what psycopg's maintainers advise when the event is
    known: psycopg issue 701).
    """
    connection.close()
    pool = getattr(connection, "pool", None)  # PostgreSQL with a pool only
    if pool is not None:
        try:
            pool.check()
        except Exception:  # noqa: BLE001 - the server may still be down
            log.warning("checking the database pool failed", exc_info=True)


class _Heartbeat:
    """One thread per process extends the leases of the runs it drives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Held from a beat's copy of the runs to its commit: `release` waits on
        # it, so no beat that copied a run extends its lease after it returns.
        self._beating = threading.Lock()
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

    def release(self, task_id: str) -> None:
        """Stop extending a run's lease, and wait out a beat under way: after
        this returns, a write that ends the lease is not undone by a beat."""
        self.remove(task_id)
        with self._beating:
            pass

    def _loop(self) -> None:
        while True:
            time.sleep(settings.REACH_HEARTBEAT_S)
            with self._beating:
                self._beat()

    def _beat(self) -> None:
        with self._lock:
            runs = dict(self._runs)
        if not runs:
            return
        try:
            close_old_connections()
            expires = timezone.now() + timedelta(seconds=settings.REACH_LEASE_S)
            with _write_transaction():
                for task_id, (owner, epoch) in runs.items():
                    Task.objects.filter(
                        pk=task_id, lease_owner=owner, lease_epoch=epoch
                    ).update(lease_expires_at=expires)
        except (OperationalError, InterfaceError):
            log.warning("lease heartbeat lost its database connection", exc_info=True)
            recover_connections()
        except Exception:  # noqa: BLE001 - next beat tries again
            log.warning("lease heartbeat failed", exc_info=True)
        finally:
            # Hold no connection between beats (a pool or the server keeps it).
            connection.close()


_heartbeat = _Heartbeat()


@dataclass(frozen=True)
class Lease:
    """Who drives a run, under which epoch: the fence on every write of that run."""

    owner: str
    epoch: int


__all__ = [
    "Lease",
    "recover_connections",
    "task_claim",
]
