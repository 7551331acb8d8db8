"""Counting what a run costs, in counts that repeat on a noisy machine.

A :class:`Meter` counts, while it is open, the SQL statements sent on every
thread (and which of them ran inside a transaction, where the run holds its
task's row), the transactions committed, the Redis round trips (a pipeline is
one), the pushes handed to the push loop, and the Python function calls made
on the thread that opened it (``cProfile``: :func:`function_calls`, in a pass
of its own, so the counting wrappers are not in the count). ``tests/budget``
holds a run to these counts against ``tests/budget/budget.toml``.

What is left out, and why: the metrics counters' sender thread (``reach-counters``)
coalesces the bumps of commits that come close together into one pipeline, so
its round trips depend on timing; it is off the run's path, and takes at most
one round trip per commit. So does connection upkeep (a handshake, a health
check's PING), which comes with a new or idle connection, not with the work.
"""

from __future__ import annotations

import cProfile
import pstats
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import redis.asyncio.connection as async_redis
import redis.connection as sync_redis
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from infra import push as push_module

#: Threads whose Redis traffic is not the run's (see the module's docstring).
UNCOUNTED_THREADS = ("reach-counters",)

#: Connection upkeep, not work: a new or idle connection's handshake and
#: health check (redis-py sends them when it (re)connects or after an idle
#: interval, so their number depends on timing).
_UPKEEP = (b"PING", b"HELLO", b"CLIENT", b"SELECT", b"AUTH")

#: Transaction control sent as a statement on some backends only (SQLite's
#: ``BEGIN IMMEDIATE``; psycopg begins implicitly): not counted, so the counts
#: are the same on both.
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")


@dataclass
class Counts:
    """What one measured stretch of work cost."""

    sql: int = 0
    sql_in_transactions: int = 0
    transactions: int = 0
    redis_round_trips: int = 0
    pushes: int = 0
    function_calls: int = 0
    statements: list[str] = field(default_factory=list, repr=False)
    redis_by_thread: Counter[str] = field(default_factory=Counter, repr=False)
    redis_commands: list[str] = field(default_factory=list, repr=False)
    #: What was pushed, in order: (group, message).
    pushed: list[tuple[str, dict[str, Any]]] = field(default_factory=list, repr=False)

    def per(self, n: float) -> dict[str, float]:
        """The counts divided by ``n`` (runs, steps), rounded to a tenth."""
        return {name: round(value / n, 1) for name, value in self.numbers().items()}

    def numbers(self) -> dict[str, int]:
        return {
            "sql": self.sql,
            "sql_in_transactions": self.sql_in_transactions,
            "transactions": self.transactions,
            "redis_round_trips": self.redis_round_trips,
            "pushes": self.pushes,
            "function_calls": self.function_calls,
        }


class Meter:
    """Count while open (``with meter.counting(): ...``); read ``meter.counts``
    (all but ``function_calls``, which :func:`function_calls` counts)."""

    def __init__(self) -> None:
        self.counts = Counts()
        self._lock = threading.Lock()
        self._futures: list[Future[Any]] = []

    @contextmanager
    def counting(self) -> Iterator[Counts]:
        meter = self
        real_execute = CursorWrapper._execute_with_wrappers
        real_commit = BaseDatabaseWrapper.commit
        real_send = sync_redis.AbstractConnection.send_packed_command
        real_async_send = async_redis.AbstractConnection.send_packed_command
        real_submit = push_module._Pusher.submit

        def execute(self: CursorWrapper, sql: Any, *args: Any, **kwargs: Any) -> Any:
            text = str(sql)
            if not text.lstrip().upper().startswith(_CONTROL):
                with meter._lock:
                    meter.counts.sql += 1
                    meter.counts.statements.append(text)
                    if self.db.in_atomic_block:
                        meter.counts.sql_in_transactions += 1
            return real_execute(self, sql, *args, **kwargs)

        def commit(self: BaseDatabaseWrapper) -> Any:
            with meter._lock:
                meter.counts.transactions += 1
            return real_commit(self)

        def sent(thread: str, command: Any) -> None:
            packed = command[0] if command else b""
            head = b"".join(packed) if isinstance(packed, list | tuple) else packed
            name = head.split(b"\r\n")[2] if head.startswith(b"*") else head[:8]
            with meter._lock:
                meter.counts.redis_commands.append(f"{thread}: {head[:120]!r}")
                meter.counts.redis_by_thread[thread] += 1
                if thread not in UNCOUNTED_THREADS and name.upper() not in _UPKEEP:
                    meter.counts.redis_round_trips += 1

        def send(self: Any, *args: Any, **kwargs: Any) -> Any:
            sent(threading.current_thread().name, args[:1])
            return real_send(self, *args, **kwargs)

        async def async_send(self: Any, *args: Any, **kwargs: Any) -> Any:
            sent(threading.current_thread().name, args[:1])
            return await real_async_send(self, *args, **kwargs)

        def submit(self: Any, group: str, message: dict[str, Any]) -> Future[Any]:
            future = real_submit(self, group, message)
            with meter._lock:
                meter.counts.pushes += 1
                meter.counts.pushed.append((group, message))
                meter._futures.append(future)
            return future

        with ExitStack() as stack:
            for target, name, replacement in (
                (CursorWrapper, "_execute_with_wrappers", execute),
                (BaseDatabaseWrapper, "commit", commit),
                (sync_redis.AbstractConnection, "send_packed_command", send),
                (async_redis.AbstractConnection, "send_packed_command", async_send),
                (push_module._Pusher, "submit", submit),
            ):
                stack.enter_context(mock.patch.object(target, name, replacement))
            try:
                yield self.counts
            finally:
                # Every push reached Redis before the patches go.
                for future in self._futures:
                    future.result(timeout=10)


@contextmanager
def function_calls() -> Iterator[list[int]]:
    """The Python function calls (builtins included) made on this thread while
    open: ``with function_calls() as calls: ...``, then ``calls[0]``."""
    found: list[int] = []
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield found
    finally:
        profile.disable()
        found.append(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]
