"""``GET /api/tasks/{id}/events/``: one task's live updates as Server-Sent Events.

For programs, which hold a bearer token but no browser: the task websocket's
``step`` and ``task`` events (runs/events.py builds both, for both), one per SSE
event named after its ``type``, its ``data`` the websocket's JSON, its ``id`` the
rev it carries: a step event the step's rev, a task event the task's. The
``delta`` events of a reply being written (runs/streaming.py) come as pushed,
with no ``id`` and no read of the database.

Ids never decrease. A client that reconnects with ``Last-Event-ID: R`` (or asks
``?after=R``) gets the latest state of every step changed after ``R``, and the
task only if it changed after ``R`` too: nothing it has, nothing it lacks. A
task event whose task changed only through the step just before it shares that
step's id (one change, one rev) and leaves in the same write. The stream ends
after the final task event; asked to resume at or after it, the server answers
204, which tells an EventSource to stop reconnecting.

Live updates arrive as the websocket's do: the pokes that runs/events.py pushes
to the task's group after each commit wake the stream, which then reads what
changed since its cursor. A ``: keep-alive`` comment every :data:`HEARTBEAT_S`
keeps proxies from closing an idle stream, and each one re-reads the task (a
lost poke costs at most that delay). As often, busy or not, the stream checks
the token and the right to read the task again; a revoked token or an ended
session also ends it at once (their push). A client that disconnects cancels
the stream (Django's ASGI handler does), which leaves its groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from engine.spec import FINAL_TASK_STATUSES
from infra.push import task_group, user_group
from runs.api.auth import SESSION_ENDED, token_group, token_still_valid
from runs.api.common import visible_task_or_404
from runs.events import changes_since, wants_html
from runs.models import ApiToken
from runs.selectors import visible_task_values
from runs.streaming import DELTA_MESSAGE, fresh_delta, live_reply

log = logging.getLogger(__name__)

#: Seconds between ``: keep-alive`` comments on an idle stream.
HEARTBEAT_S = 15.0
KEEP_ALIVE = b": keep-alive\n\n"
EVENT_STREAM = "text/event-stream"


def sse_event(event: dict[str, Any], event_id: int | None) -> bytes:
    """One SSE event: ``id``, ``event`` (the websocket's ``type``) and ``data``.

    ``json.dumps`` escapes line breaks inside strings, so ``data`` is one line;
    U+2028 and U+2029 may stay raw, as SSE splits lines on CR and LF only. A
    ``delta`` has no id (None): it is not durable, so a reconnect's
    ``Last-Event-ID`` stays the last change's rev.
    """
    data = json.dumps(event, ensure_ascii=False)
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}event: {event['type']}\ndata: {data}\n\n".encode()


class Next(Enum):
    """What the stream does after a read."""

    WAIT = "wait"  # for a poke or the heartbeat
    AGAIN = "again"  # read again at once
    END = "end"  # close the stream


class TaskCursor:
    """Where one stream stands: every change up to ``cursor`` is sent.

    ``read`` turns :func:`~runs.events.changes_since` into SSE events. It runs in
    a worker thread (it reads the database), one call at a time.
    """

    def __init__(self, task_id: str, after: int | None, *, html: bool = True) -> None:
        self.task_id = task_id
        self.html = html
        self.cursor = after or 0
        # A resuming client has the task as of its Last-Event-ID; a new one has
        # nothing and gets the task event even while the task is at rev 0.
        self.task_sent = after is not None
        self.status_sent = ""

    def read(self) -> tuple[list[bytes], Next]:
        changes = changes_since(
            self.task_id,
            self.cursor,
            status_sent=self.status_sent,
            with_task=not self.task_sent,
            html=self.html,
        )
        if not changes.status:
            return [], Next.END  # Purged or deleted: nothing is left to stream.
        events = [sse_event(e, int(e["step"]["rev"])) for e in changes.steps]
        following = Next.WAIT
        if changes.task is not None:
            task = changes.task["task"]
            rev, final = int(task["rev"]), task["status"] in FINAL_TASK_STATUSES
            if rev > changes.cursor:
                # The task moved on between reading its steps and reading it:
                # its event would run ahead of steps this read did not see (and
                # might end the stream without them). Read again instead.
                following = Next.AGAIN
            elif rev > self.cursor or not self.task_sent:
                events.append(sse_event(changes.task, rev))
                self.task_sent = True
                following = Next.END if final else Next.WAIT
            elif final:
                following = Next.END  # Resumed at the end: the client has it all.
        self.cursor = max(self.cursor, changes.cursor)
        self.status_sent = changes.status
        return events, following


@dataclass(frozen=True)
class Watcher:
    """Who streams: the user, and the token they came with (None: a session)."""

    user_id: Any
    token_id: int | None
    #: Whether step events carry the page's ``html`` (as on the task websocket:
    #: for a session, and for a token only when the URL asks, ``?html=1``).
    html: bool = True

    @property
    def group(self) -> str:
        """The group told when this token is revoked or this session ends."""
        if self.token_id is None:
            return user_group(self.user_id)
        return token_group(self.token_id)

    def may_still_watch(self, task_id: str) -> bool:
        """Token unrevoked, user active and still allowed to read the task."""
        if self.token_id is not None and not token_still_valid(self.token_id):
            return False
        user = get_user_model().objects.filter(pk=self.user_id, is_active=True).first()
        return user is not None and visible_task_values(user, task_id) is not None


async def task_event_stream(
    *, task_id: str, after: int | None, watcher: Watcher
) -> AsyncIterator[bytes]:
    """The SSE body: what changed after ``after``, then every change live until
    the final task event, with a keep-alive comment on quiet stretches."""
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is not configured"
    channel = await layer.new_channel()
    poked = asyncio.Event()
    ended = asyncio.Event()
    # Pieces of the reply being written (runs/streaming.py): sent on with no
    # read of the database; ``woken`` is set by them and by pokes alike.
    deltas: list[dict[str, Any]] = []
    woken = asyncio.Event()

    async def listen() -> None:
        # Receive beside the stream, never under a timeout: the Redis pub/sub
        # layer drops a channel whose receive is cancelled.
        try:
            while True:
                message = await layer.receive(channel)
                woken.set()
                if message.get("type") == DELTA_MESSAGE:
                    deltas.append(message["delta"])
                    continue
                if message.get("type") == SESSION_ENDED:
                    ended.set()
                poked.set()
        except Exception:  # noqa: BLE001 - the stream goes on at heartbeat pace
            log.warning(
                "event stream of task %s lost its pokes", task_id, exc_info=True
            )

    listener = asyncio.ensure_future(listen())
    groups: list[str] = []
    try:
        await asyncio.sleep(0)  # Let the listener start receiving.
        # Join before the first read, so a change committed in between wakes it.
        for group in (task_group(task_id), watcher.group):
            await layer.group_add(group, channel)
            groups.append(group)
        cursor = TaskCursor(task_id, after, html=watcher.html)
        read = database_sync_to_async(cursor.read)
        may_watch = database_sync_to_async(watcher.may_still_watch)
        clock = asyncio.get_running_loop().time
        next_check = clock() + HEARTBEAT_S
        first = True
        while True:
            poked.clear()
            events, following = await read()
            if events:
                # One write per read, so a task event leaves with the step
                # whose rev it shares.
                yield b"".join(events)
            if following is Next.END:
                return
            if following is Next.AGAIN:
                continue
            if first:
                # Connected mid-reply: the text so far, then the pieces.
                first = False
                so_far = await asyncio.to_thread(
                    live_reply, task_id, after=cursor.cursor
                )
                if so_far is not None:
                    yield sse_event(so_far, None)
            while True:
                woken.clear()
                if deltas:
                    fresh = [
                        sse_event(d, None)
                        for d in deltas
                        if fresh_delta(d, cursor=cursor.cursor)
                    ]
                    deltas.clear()
                    if fresh:
                        yield b"".join(fresh)
                if poked.is_set():
                    break
                if not await _woken(woken, HEARTBEAT_S):
                    yield KEEP_ALIVE
                    break
            if ended.is_set():
                return
            # Busy streams too: a revocation whose push was lost, a lost
            # permission (no push at all) end the stream within a heartbeat.
            if clock() >= next_check:
                if not await may_watch(task_id):
                    return
                next_check = clock() + HEARTBEAT_S
    finally:
        # Cancelling the receive also unsubscribes the channel.
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        for group in groups:
            try:
                await layer.group_discard(group, channel)
            except Exception:  # noqa: BLE001 - the stream is over either way
                log.warning("leaving %s failed", group, exc_info=True)


async def _woken(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; whether it came."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
        return True
    return False


def resume_point(request: Request) -> int | None:
    """The rev the client has everything up to: ``Last-Event-ID`` (what an
    EventSource sends when it reconnects, so it wins), else ``?after=``; None
    for a new client."""
    value = request.headers.get("Last-Event-ID") or request.query_params.get("after")
    if value is None or value == "":
        return None
    try:
        after = int(value)
    except ValueError:
        after = -1
    if after < 0:
        raise ValidationError(
            {"after": ["Last-Event-ID and after are revs: whole numbers, 0 or more."]}
        )
    return after


class TaskEvents(APIView):
    """Authenticates, checks the task is visible and the resume point valid,
    then hands the connection to the event stream."""

    def perform_content_negotiation(
        self, request: Request, force: bool = False
    ) -> tuple[BaseRenderer, str]:
        # The stream is written by hand, not rendered; refusals (400, 401, 404)
        # answer JSON as everywhere else, whatever the Accept header (an
        # EventSource asks for text/event-stream only).
        renderer = self.get_renderers()[0]
        return renderer, renderer.media_type

    @extend_schema(
        operation_id="tasks_events",
        summary="A task's live updates as Server-Sent Events",
        description=(
            "`step` and `task` events, the task websocket's JSON as `data`, each "
            "with `id: <rev>`; ids never decrease. Reconnect with `Last-Event-ID` "
            "(or `?after=`) to get every change after that rev and nothing twice. "
            "While the model writes a reply, `delta` events (no `id`, not stored): "
            "the reply's text at an offset, the tool calls being written by name; "
            "a stream that starts mid-reply gets the text so far first. "
            "The stream ends after the final task event; `: keep-alive` comments "
            "every 15 s while idle. 204 when resumed at or after the final event."
        ),
        parameters=[
            OpenApiParameter(
                "after",
                OpenApiTypes.INT,
                description="Resume after this rev (Last-Event-ID wins).",
            ),
            OpenApiParameter(
                "Last-Event-ID",
                OpenApiTypes.INT,
                location=OpenApiParameter.HEADER,
                description="The id of the last event received.",
            ),
        ],
        responses={
            (200, EVENT_STREAM): OpenApiResponse(
                OpenApiTypes.STR, description="The event stream."
            ),
            204: OpenApiResponse(description="The client has the final event."),
        },
    )
    def get(self, request: Request, task_id: str) -> HttpResponseBase:
        task = visible_task_or_404(request, task_id)
        after = resume_point(request)
        if (
            after is not None
            and after >= task.rev
            and task.status in (FINAL_TASK_STATUSES)
        ):
            return HttpResponse(status=204)
        token = request.auth if isinstance(request.auth, ApiToken) else None
        watcher = Watcher(
            request.user.pk,
            None if token is None else token.pk,
            html=wants_html(
                by_token=token is not None, asked=request.query_params.get("html")
            ),
        )
        response = StreamingHttpResponse(
            task_event_stream(task_id=str(task.pk), after=after, watcher=watcher),
            content_type=f"{EVENT_STREAM}; charset=utf-8",
        )
        # Nothing between us and the client may cache or buffer the stream.
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
