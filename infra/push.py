"""Pushing events to websocket groups from sync code (workers, web views).

``async_to_sync(group_send)`` runs every call on a fresh event loop, and
channels_redis pools connections per loop: one new Redis connection per push
(docs/stack-notes.md trap 1). Instead, one long-lived event loop per process runs
on a daemon thread (started lazily, after any fork) and every push is handed to it.
Pushes of one group are sent in the order they were made.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import Future
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


class _Pusher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None
        self._tails: dict[str, asyncio.Future[Any]] = {}

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="reach-push", daemon=True
                )
                thread.start()
                self._loop, self._pid, self._tails = loop, os.getpid(), {}
            return self._loop

    def submit(self, group: str, message: dict[str, Any]) -> Future[Any]:
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(self._send(group, message), loop)

    async def _send(self, group: str, message: dict[str, Any]) -> None:
        previous = self._tails.get(group)
        current: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._tails[group] = current
        try:
            if previous is not None:
                await previous
            layer = get_channel_layer()
            if layer is not None:
                await asyncio.wait_for(layer.group_send(group, message), timeout=5)
        except Exception:  # noqa: BLE001 - a lost push is recovered by resume
            log.warning("push to %s failed", group, exc_info=True)
        finally:
            current.set_result(None)
            if self._tails.get(group) is current:
                del self._tails[group]


_pusher = _Pusher()


def push(group: str, message: dict[str, Any]) -> Future[Any]:
    """Send ``message`` to ``group`` without waiting (in order per group)."""
    return _pusher.submit(group, message)


def task_group(task_id: object) -> str:
    return f"task_{task_id}"


def user_group(user_id: object) -> str:
    return f"user_{user_id}"


APPROVALS_GROUP = "approvals"
