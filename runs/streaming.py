"""The reply being written: pushed to the task's watchers while the model writes it.

Nothing here is durable. The record of a model call is its whole reply, written
when the call ends (:mod:`engine.loop`); what is pushed meanwhile is a courtesy
to whoever watches. The worker's :class:`LiveReply` hears each streamed piece
(:class:`engine.model_client.ReplyWatcher`) and coalesces them: the first piece
of a window starts a timer of ``REACH_STREAM_COALESCE_MS``, and when it fires
everything written since leaves in one push to the task's group and one Redis
write of the text so far (a short-lived key per task, so a socket or an event
stream that connects mid-reply starts from it, :func:`live_reply`). A reply
that ends within its first window costs nothing at all; the key is deleted when
the call ends.

What is pushed is the ``delta`` event of the task websocket and the event
stream (docs/api.md "Websockets"): the text redacted as the recorded step will
be, the names of the tool calls being written without their arguments, and the
task's ``rev`` when the reply began, so a client drops a delta of a reply whose
step it already has.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from engine.model_client import ReplyDelta
from engine.redaction import Redactor
from infra.push import push, task_group
from infra.runtime import redis_client

log = logging.getLogger(__name__)

#: The message type of a delta in the task's group (the consumers' handler).
DELTA_MESSAGE = "reach.delta"
#: How long a reply's text so far outlives a worker that died mid-reply.
LIVE_TTL_S = 120


class _Windows:
    """The ends of coalescing windows, fired by one daemon thread per process
    (started lazily, after any fork): a reply pays a heap push per window, not
    a thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._pid: int | None = None

    def after(self, seconds: float, fire: Callable[[], None]) -> None:
        with self._cond:
            if self._pid != os.getpid():
                self._pid, self._due = os.getpid(), []
                threading.Thread(
                    target=self._run, name="reach-live-reply", daemon=True
                ).start()
            entry = (time.monotonic() + seconds, next(self._order), fire)
            heapq.heappush(self._due, entry)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    self._cond.wait(wait)
                _, _, fire = heapq.heappop(self._due)
            try:
                fire()
            except Exception:  # noqa: BLE001 - a lost delta is not a lost reply
                log.warning("a live reply's window failed", exc_info=True)


_windows = _Windows()


def live_key(task_id: Any) -> str:
    return f"reach:reply:{task_id}"


def delta_event(
    task_id: Any,
    *,
    rev: int,
    offset: int,
    text: str,
    tools: list[str],
    reset: bool = False,
) -> dict[str, Any]:
    """The ``delta`` event: ``text`` goes at ``offset`` of the reply's text
    (``reset``: it replaces all of it, as after a retry)."""
    return {
        "type": "delta",
        "task": str(task_id),
        "rev": rev,
        "offset": offset,
        "text": text,
        "tools": tools,
        "reset": reset,
    }


class LiveReply:
    """The worker's :class:`~engine.model_client.ReplyWatcher` for one run: one
    reply at a time, each from its first piece to :meth:`ended`."""

    def __init__(
        self,
        task_id: Any,
        *,
        window_s: float,
        rev: Callable[[], int],
        redactor: Redactor,
    ) -> None:
        self.task_id = str(task_id)
        self.window_s = window_s
        self._rev = rev
        self._redactor = redactor
        self._lock = threading.Lock()  # the reply's state
        self._io = threading.Lock()  # a window's write and push, and the end
        self._redis: redis.Redis | None = None
        # Windows are numbered over the run, so one left from an ended reply
        # never fires into the next.
        self._opened = 0
        self._start()

    def _start(self) -> None:
        self._text = ""
        self._tools: tuple[str, ...] = ()
        self._sent = ""  # the redacted text the watchers have
        self._sent_tools: tuple[str, ...] = ()
        self._reset = False
        self._window: int | None = None  # the open window (None: none)
        self._began_at: int | None = None  # the task's rev when the reply began
        self._stored = False

    def delta(self, delta: ReplyDelta) -> None:
        with self._lock:
            if self._began_at is None:
                self._began_at = self._rev()
            if delta.reset:
                self._text, self._reset = "", True
            self._text += delta.text
            self._tools = delta.tools
            if self._window is None:
                self._opened += 1
                window = self._window = self._opened
                _windows.after(self.window_s, lambda: self._flush(window))

    def _flush(self, window: int) -> None:
        """The window ended: what was written since goes out, in one push.

        The Redis write and the push happen outside the lock the model's thread
        takes for each piece (a slow Redis never slows the reading of the
        stream), under one that orders them before the reply's end."""
        with self._io:
            with self._lock:
                if self._window != window:
                    return  # The reply ended first.
                self._window = None
                text = self._redactor.text(self._text)
                tools = self._tools
                reset = self._reset or not text.startswith(self._sent)
                if not reset and text == self._sent and tools == self._sent_tools:
                    return
                offset = 0 if reset else len(self._sent)
                rev = self._began_at or 0
                self._sent, self._sent_tools, self._reset = text, tools, False
            event = delta_event(
                self.task_id,
                rev=rev,
                offset=offset,
                text=text[offset:],
                tools=list(tools),
                reset=reset,
            )
            snapshot = {"rev": rev, "text": text, "tools": list(tools)}
            try:
                self._client().set(
                    live_key(self.task_id),
                    json.dumps(snapshot, ensure_ascii=False),
                    ex=LIVE_TTL_S,
                )
                self._stored = True
            except redis.RedisError:
                log.warning("the live reply of %s was not stored", self.task_id)
            push(task_group(self.task_id), {"type": DELTA_MESSAGE, "delta": event})

    def ended(self) -> None:
        with self._io:
            with self._lock:
                stored = self._stored
                self._start()
            if stored:
                try:
                    self._client().delete(live_key(self.task_id))
                except redis.RedisError:
                    log.warning("the live reply of %s outlives it", self.task_id)

    def _client(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis_client()
        return self._redis


def live_reply(task_id: Any, *, after: int) -> dict[str, Any] | None:
    """The reply being written for ``task_id`` as one ``delta`` event (all its
    text so far, ``reset``), for a watcher that has every change up to
    ``after``; None when no reply is being written (or only one whose step the
    watcher already has)."""
    try:
        raw = redis_client().get(live_key(task_id))
    except redis.RedisError:
        log.warning("the live reply of %s could not be read", task_id)
        return None
    if raw is None:
        return None
    snapshot = json.loads(raw)
    if int(snapshot["rev"]) < after:
        return None
    return delta_event(
        task_id,
        rev=int(snapshot["rev"]),
        offset=0,
        text=str(snapshot["text"]),
        tools=list(snapshot["tools"]),
        reset=True,
    )


def fresh_delta(event: dict[str, Any], *, cursor: int) -> bool:
    """Whether a pushed delta is of a reply whose step a watcher at ``cursor``
    does not have yet (it began at or after what the watcher has)."""
    return int(event["rev"]) >= cursor
