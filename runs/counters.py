"""Monotonic counters of what runs did, for ``/metrics``: kept in Redis.

A Prometheus counter must only go up; counting rows at scrape made the totals fall
whenever the purge deleted old traces (read as a reset) and made each scrape
aggregate the whole Step table. Instead every write of a step that leaves it
final (:data:`~engine.spec.FINAL_STEP_STATUSES`) bumps counters in one Redis hash
after its transaction commits (every path, the loop's, a decision's, expiry's and
cancellation's, makes a step final once, so each step counts once), and each
model or tool call's latency joins a short list of recent samples (the
summaries' quantiles). A scrape reads one hash and a few short lists.

Why Redis and not a counters table in the step's own transaction: every worker
thread would update the same few rows (``calculate succeeded``) in every step
transaction and hold their locks until commit, serialising runs on PostgreSQL and
adding a query to the per-step path. The cost of Redis: a worker killed between
the commit and the bump loses that bump (a count a little low, never a fall), and
a Redis restart without persistence resets the counters, which Prometheus
handles as it handles any process restart. A bump never fails a run: Redis
errors are logged and the count is skipped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import redis
from django.db import transaction

from engine.spec import FINAL_STEP_STATUSES, DetailKey, StepKind, StepStatus
from infra.runtime import redis_client

log = logging.getLogger(__name__)

COUNTERS_KEY = "reach:metrics:counters"
LATENCY_KEY = "reach:metrics:latency:"
#: Recent latency samples kept per series (model, each tool).
LATENCY_SAMPLES = 1000
#: How long the sender waits after a commit's bumps for more to join them.
COALESCE_S = 0.25
#: Separates a counter's name from its labels in the hash's field names (tool
#: names of imported or MCP tools may hold any printable character).
SEP = "\x1f"


class Counter(StrEnum):
    """The counters in the hash; labels follow the name, joined by :data:`SEP`."""

    MODEL_CALLS = "model_calls"
    MODEL_ERRORS = "model_errors"
    MODEL_SECONDS = "model_seconds"  # sum of the latencies counted below
    MODEL_TIMED = "model_timed"  # model calls with a latency
    TOOL_CALLS = "tool_calls"  # tool, final status
    TOOL_FAILURES = "tool_failures"  # tool
    TOOL_SECONDS = "tool_seconds"  # tool
    TOOL_TIMED = "tool_timed"  # tool
    TASKS_FINISHED = "tasks_finished"  # status, stop reason


def _field(counter: Counter, *labels: str) -> str:
    return SEP.join([counter.value, *labels])


def _latency_key(tool: str | None) -> str:
    return LATENCY_KEY + ("model" if tool is None else f"tool{SEP}{tool}")


@dataclass
class _Bumps:
    """What one transaction adds: counter increments and latency samples."""

    counts: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    samples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, value: float = 1) -> None:
        self.counts[name] += value

    def send(self) -> None:
        if not self.counts:
            return
        try:
            pipe = redis_client().pipeline(transaction=False)
            for name, value in self.counts.items():
                if float(value).is_integer():
                    pipe.hincrby(COUNTERS_KEY, name, int(value))
                else:
                    pipe.hincrbyfloat(COUNTERS_KEY, name, value)
            for key, entries in self.samples.items():
                pipe.lpush(key, *entries)
                pipe.ltrim(key, 0, LATENCY_SAMPLES - 1)
            pipe.execute()
        except redis.RedisError:
            log.warning("metrics counters unavailable; a count is lost", exc_info=True)


class _Sender:
    """Sends the bumps of committed writes to Redis on a thread of its own.

    A commit hands its bumps over and goes on: the run's path pays no round trip
    to Redis. Bumps that pile up while a send is in flight are merged into the
    next one, so under load many commits share one pipeline. A worker killed
    before the thread sends loses those bumps (counts a little low, as the
    module says, never a fall).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._wake = threading.Event()
        self._pending = _Bumps()
        self._pid: int | None = None

    def add(self, bumps: _Bumps) -> None:
        with self._lock:
            for name, value in bumps.counts.items():
                self._pending.counts[name] += value
            for key, entries in bumps.samples.items():
                self._pending.samples[key].extend(entries)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(
                    target=self._loop, name="reach-counters", daemon=True
                ).start()
        self._wake.set()

    def flush(self) -> None:
        """Send what is pending now, after any send in flight (a scrape in the
        same process sees every count its process made)."""
        with self._sending:
            with self._lock:
                bumps, self._pending = self._pending, _Bumps()
            bumps.send()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            # Let the bumps of the next commits join this send (one pipeline for
            # many steps under load).
            time.sleep(COALESCE_S)
            self._wake.clear()
            self.flush()


_sender = _Sender()


def flush() -> None:
    """Send this process's pending counts (see :class:`_Sender`)."""
    _sender.flush()


def _seconds(started: datetime | None, finished: datetime | None) -> float | None:
    if started is None or finished is None:
        return None
    try:
        return max(0.0, (finished - started).total_seconds())
    except TypeError:  # a value that is not a datetime: no sample, still a count
        return None


def _imported(task: Any) -> bool:
    # Never load a deferred field for this: it would add a query per step.
    if "origin" in task.get_deferred_fields():
        return False
    return bool(task.origin)


def count_steps_on_commit(task: Any, steps: Iterable[Any]) -> None:
    """After commit, count every step of ``steps`` that this write made final.

    ``steps`` are Step rows as just written. Steps of imported traces and steps a
    fork copied from its parent ran elsewhere (or before): they are not counted.
    """
    if _imported(task):
        return
    bumps = _Bumps()
    now = f"{time.time():.3f}"
    for step in steps:
        if step.status not in FINAL_STEP_STATUSES:
            continue
        if DetailKey.COPIED_FROM in (step.detail or {}):
            continue
        seconds = _seconds(step.started_at, step.finished_at)
        if step.kind == StepKind.MODEL_CALL:
            bumps.add(_field(Counter.MODEL_CALLS))
            if step.status == StepStatus.FAILED:
                bumps.add(_field(Counter.MODEL_ERRORS))
            if seconds is not None:
                bumps.add(_field(Counter.MODEL_SECONDS), seconds)
                bumps.add(_field(Counter.MODEL_TIMED))
                bumps.samples[_latency_key(None)].append(f"{now} {seconds:.6f}")
        elif step.kind == StepKind.TOOL_CALL:
            tool = step.tool or ""
            bumps.add(_field(Counter.TOOL_CALLS, tool, str(step.status)))
            if step.status == StepStatus.FAILED:
                bumps.add(_field(Counter.TOOL_FAILURES, tool))
            if seconds is not None:
                bumps.add(_field(Counter.TOOL_SECONDS, tool), seconds)
                bumps.add(_field(Counter.TOOL_TIMED, tool))
                bumps.samples[_latency_key(tool)].append(f"{now} {seconds:.6f}")
    if bumps.counts:
        transaction.on_commit(lambda: _sender.add(bumps))


def count_task_finished_on_commit(task: Any) -> None:
    """After commit, count ``task`` as finished with its status and stop reason."""
    if _imported(task):
        return
    bumps = _Bumps()
    bumps.add(
        _field(Counter.TASKS_FINISHED, str(task.status), str(task.stop_reason or ""))
    )
    transaction.on_commit(lambda: _sender.add(bumps))


@dataclass
class Totals:
    """The counters as read at scrape, by counter: labels -> value."""

    values: dict[Counter, dict[tuple[str, ...], float]]

    def get(self, counter: Counter, *labels: str) -> float:
        return self.values.get(counter, {}).get(labels, 0.0)

    def series(self, counter: Counter) -> list[tuple[tuple[str, ...], float]]:
        return sorted(self.values.get(counter, {}).items())


def read_totals() -> Totals:
    """Every counter (raises :class:`redis.RedisError` when Redis is down)."""
    values: dict[Counter, dict[tuple[str, ...], float]] = defaultdict(dict)
    for raw, value in redis_client().hgetall(COUNTERS_KEY).items():
        name, *labels = raw.decode().split(SEP)
        try:
            counter = Counter(name)
        except ValueError:
            continue
        values[counter][tuple(labels)] = float(value)
    return Totals(dict(values))


def recent_latencies(tool: str | None, window: timedelta) -> list[float]:
    """Seconds of the model's (``tool`` None) or a tool's calls within ``window``
    (at most :data:`LATENCY_SAMPLES`, the newest)."""
    since = time.time() - window.total_seconds()
    values = []
    for entry in redis_client().lrange(_latency_key(tool), 0, -1):
        at, _, seconds = entry.decode().partition(" ")
        if float(at) >= since:
            values.append(float(seconds))
    return values
