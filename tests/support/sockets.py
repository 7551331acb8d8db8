"""The product's websockets in-process, through Channels' communicator, and
reading their frames until what a test waits for has come."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from channels.testing import WebsocketCommunicator

from approvals.consumers import ApprovalsConsumer
from runs.consumers import TaskConsumer
from tests.support.cast import ORIGIN

#: A frame as the client reads it (``receive_json_from``).
Frame = dict[str, Any]


def _headers(origin: tuple[bytes, bytes] | None) -> list[tuple[bytes, bytes]]:
    return [origin] if origin else []


def task_socket(
    user: Any,
    task_id: str,
    origin: tuple[bytes, bytes] | None = ORIGIN,
    query: str = "",
    subprotocols: list[str] | None = None,
) -> WebsocketCommunicator:
    """``/ws/tasks/<task_id>/[?query]`` as ``user``, offering ``subprotocols``
    (``["bearer", key]``), not connected yet."""
    path = f"/ws/tasks/{task_id}/" + (f"?{query}" if query else "")
    comm = WebsocketCommunicator(
        TaskConsumer.as_asgi(),
        path,
        headers=_headers(origin),
        subprotocols=subprotocols,
    )
    comm.scope["user"] = user
    comm.scope["url_route"] = {"kwargs": {"task_id": task_id}}
    return comm


def queue_socket(
    user: Any,
    origin: tuple[bytes, bytes] | None = ORIGIN,
    subprotocols: list[str] | None = None,
) -> WebsocketCommunicator:
    """``/ws/approvals/`` (the live approval queue) as ``user``, offering
    ``subprotocols``, not connected yet."""
    comm = WebsocketCommunicator(
        ApprovalsConsumer.as_asgi(),
        "/ws/approvals/",
        headers=_headers(origin),
        subprotocols=subprotocols,
    )
    comm.scope["user"] = user
    return comm


async def frames_until(
    comm: WebsocketCommunicator,
    done: Callable[[list[Frame]], bool],
    timeout: float = 10,
) -> list[Frame]:
    """Every frame read until ``done(frames read so far)`` holds (asked before
    the first read too); each frame may take up to ``timeout`` seconds."""
    frames: list[Frame] = []
    while not done(frames):
        frames.append(await comm.receive_json_from(timeout=timeout))
    return frames


async def next_frame(
    comm: WebsocketCommunicator,
    wanted: Callable[[Frame], bool],
    timeout: float = 10,
) -> Frame:
    """The next frame that is ``wanted``, skipping any other."""
    frames = await frames_until(
        comm, lambda frames: bool(frames) and wanted(frames[-1]), timeout
    )
    return frames[-1]
