"""The product's websockets in-process, through Channels' communicator."""

from __future__ import annotations

from typing import Any

from channels.testing import WebsocketCommunicator

from approvals.consumers import ApprovalsConsumer
from runs.consumers import TaskConsumer
from tests.support.cast import ORIGIN


def _headers(origin: tuple[bytes, bytes] | None) -> list[tuple[bytes, bytes]]:
    return [origin] if origin else []


def task_socket(
    user: Any,
    task_id: str,
    origin: tuple[bytes, bytes] | None = ORIGIN,
    query: str = "",
) -> WebsocketCommunicator:
    """``/ws/tasks/<task_id>/[?query]`` as ``user``, not connected yet."""
    path = f"/ws/tasks/{task_id}/" + (f"?{query}" if query else "")
    comm = WebsocketCommunicator(TaskConsumer.as_asgi(), path, headers=_headers(origin))
    comm.scope["user"] = user
    comm.scope["url_route"] = {"kwargs": {"task_id": task_id}}
    return comm


def queue_socket(
    user: Any, origin: tuple[bytes, bytes] | None = ORIGIN
) -> WebsocketCommunicator:
    """``/ws/approvals/`` (the live approval queue) as ``user``, not connected yet."""
    comm = WebsocketCommunicator(
        ApprovalsConsumer.as_asgi(), "/ws/approvals/", headers=_headers(origin)
    )
    comm.scope["user"] = user
    return comm
