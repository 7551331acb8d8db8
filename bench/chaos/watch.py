"""Websocket clients that follow runs the way the chat page does.

Each client is ``static/js/taskstream.js`` in Python: open
``/ws/tasks/<id>/?after=<highest rev seen>`` (with a bearer token, as programs
do) on every connect, reconnect with a jittered backoff when the
socket drops (the web server restarted, say), stop at the task's final status. Every
step frame is kept, so afterwards the frames can be compared with the steps in
the database (``check_frames``). Django-free: the clients run in one asyncio
loop on a thread of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

FINAL = frozenset({"succeeded", "stopped", "failed", "cancelled"})
#: Close codes after which the chat page stops reconnecting.
REFUSED = frozenset({4403, 4401})


class Frame(NamedTuple):
    """One step frame as a client received it, on its ``connection``-th socket."""

    connection: int
    seq: int
    rev: int
    status: str


@dataclass
class Watcher:
    """What one client of one task has seen."""

    task_id: str
    frames: list[Frame] = field(default_factory=list)
    connections: int = 0
    last_rev: int = 0
    status: str = ""
    closed_code: int | None = None

    @property
    def resumed(self) -> bool:
        """Whether it reconnected at least once and resumed after ``last_rev``."""
        return self.connections > 1

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def seen(self) -> dict[int, int]:
        """The newest rev received for each step seq."""
        newest: dict[int, int] = {}
        for frame in self.frames:
            newest[frame.seq] = max(frame.rev, newest.get(frame.seq, -1))
        return newest


class FrameCheck(NamedTuple):
    missed: int  # steps whose latest state never arrived
    duplicated: int  # frames of a (seq, rev) already received
    out_of_order: int  # frames older than one received before them


def check_frames(
    frames: Iterable[tuple[int, int]], expected: Mapping[int, int]
) -> FrameCheck:
    """Compare a client's frames ``(seq, rev)``, in arrival order, with the steps
    of its task in the database (``seq -> rev``).

    Every step change gets a new rev from the task's counter, so a client that
    resumes after the highest rev it saw gets each change once, in rising rev
    order, and ends with the latest state of every step.
    """
    received: set[tuple[int, int]] = set()
    newest: dict[int, int] = {}
    highest = 0
    duplicated = out_of_order = 0
    for seq, rev in frames:
        if (seq, rev) in received:
            duplicated += 1
            continue
        received.add((seq, rev))
        if rev < highest:
            out_of_order += 1
        highest = max(highest, rev)
        newest[seq] = max(rev, newest.get(seq, -1))
    missed = sum(1 for seq, rev in expected.items() if newest.get(seq, -1) < rev)
    return FrameCheck(missed, duplicated, out_of_order)


class Watchers:
    """Every client of a chaos run, on one event loop in a daemon thread."""

    def __init__(self, ws_base: str, seed: int) -> None:
        self.ws_base = ws_base.rstrip("/")
        self.rng = random.Random(f"{seed}:websocket-backoff")
        self.watchers: list[Watcher] = []
        self.loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._futures: list[Any] = []
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="chaos-websockets", daemon=True
        )

    def start(self) -> Watchers:
        self._thread.start()
        self._stopping = asyncio.run_coroutine_threadsafe(
            self._event(), self.loop
        ).result(5)
        return self

    @staticmethod
    async def _event() -> asyncio.Event:
        return asyncio.Event()

    def watch(self, task_id: str, token: str) -> Watcher:
        """Start following ``task_id`` with ``token``'s user; returns its record."""
        watcher = Watcher(task_id)
        self.watchers.append(watcher)
        future = asyncio.run_coroutine_threadsafe(
            self._follow(watcher, token), self.loop
        )
        self._futures.append(future)
        return watcher

    def connected(self) -> int:
        """Clients that hold an open socket now (roughly: opened, not final)."""
        return sum(1 for w in self.watchers if w.connections and not w.final)

    async def _follow(self, watcher: Watcher, token: str) -> None:
        assert self._stopping is not None
        url = f"{self.ws_base}/ws/tasks/{watcher.task_id}/"
        attempt = 0
        while not self._stopping.is_set() and not watcher.final:
            try:
                async with connect(
                    f"{url}?after={watcher.last_rev}",
                    subprotocols=["bearer", token],  # type: ignore[list-item]
                    open_timeout=5,
                    close_timeout=1,
                    max_size=None,
                ) as socket:
                    attempt = 0
                    watcher.connections += 1
                    number = watcher.connections
                    await self._read(socket, watcher, number)
                    watcher.closed_code = socket.close_code
            except ConnectionClosed as exc:
                watcher.closed_code = exc.rcvd.code if exc.rcvd else None
            except (OSError, InvalidHandshake, TimeoutError):
                pass
            if watcher.final or watcher.closed_code in REFUSED:
                return
            attempt += 1
            pause = min(2.0, 0.1 * 2**attempt) * (0.5 + self.rng.random() / 2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), pause)

    async def _read(self, socket: Any, watcher: Watcher, number: int) -> None:
        assert self._stopping is not None
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            while True:
                receiving = asyncio.ensure_future(socket.recv())
                done, _ = await asyncio.wait(
                    {receiving, stopping}, return_when=asyncio.FIRST_COMPLETED
                )
                if receiving not in done:
                    receiving.cancel()
                    return
                message = json.loads(receiving.result())
                if message.get("type") == "step":
                    step = message["step"]
                    frame = Frame(number, step["seq"], step["rev"], step["status"])
                    watcher.frames.append(frame)
                    watcher.last_rev = max(watcher.last_rev, frame.rev)
                elif message.get("type") == "task":
                    watcher.status = str(message["task"]["status"])
                    if watcher.final:
                        return
        finally:
            stopping.cancel()

    def stop(self) -> None:
        """Close every socket and end the loop."""
        if self._stopping is not None:
            self.loop.call_soon_threadsafe(self._stopping.set)
        for future in self._futures:
            with contextlib.suppress(Exception):
                future.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
