"""The task websocket: ``/ws/tasks/{id}/`` for the owner or an auditor.

Browsers come with their session cookie and must come from our Origin. Programs
come with a bearer token offered as a subprotocol, ``Sec-WebSocket-Protocol:
bearer, <token>``, and the server answers ``bearer``: never a query string, which
lands in access logs. Such a socket is the token's user whatever cookie rides
along. Programs send no Origin header, so a token socket needs none; one that
does send it (a page in a browser) must name our host like any other: every socket
from a foreign Origin is refused (docs/api.md "Websockets").
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs, urlparse

import orjson
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings

from engine.spec import FINAL_TASK_STATUSES
from infra.push import task_group, user_group
from runs.api.auth import token_group, token_user
from runs.events import changes_since, wants_html, with_html
from runs.selectors import visible_task_values
from runs.streaming import fresh_delta, live_reply

#: The close code of every refused socket: anonymous, foreign Origin, no
#: permission, or nothing (any longer) to watch.
REFUSED = 4403
#: The subprotocol a program offers beside its token; the server answers with it.
BEARER_SUBPROTOCOL = "bearer"


def offered_token(scope: dict[str, Any]) -> str | None:
    """The token offered beside ``bearer`` in ``Sec-WebSocket-Protocol``.

    None when the handshake does not offer ``bearer`` (a browser's session
    socket); "" when it does but without exactly one other entry, the token
    (refused like a wrong token, never taken for a session socket).
    """
    offered = [str(p) for p in scope.get("subprotocols") or []]
    if BEARER_SUBPROTOCOL not in offered:
        return None
    others = [p for p in offered if p != BEARER_SUBPROTOCOL]
    return others[0] if len(others) == 1 else ""


class OriginOrBearerValidator:
    """Before routing: refuse a socket from a foreign Origin, and one with no
    Origin unless it offers a bearer token (which the consumer checks, ignoring
    any cookie).

    Programs send no Origin header, so Channels' AllowedHostsOriginValidator
    alone would refuse every one of them.
    """

    def __init__(self, application: Any) -> None:
        self.application = application
        self.origin_checked = AllowedHostsOriginValidator(application)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if offered_token(scope) is not None and not origin_of(scope):
            return await self.application(scope, receive, send)
        return await self.origin_checked(scope, receive, send)


def origin_of(scope: dict[str, Any]) -> str:
    """The socket's Origin header; "" when it sent none."""
    return dict(scope.get("headers") or []).get(b"origin", b"").decode("latin-1")


def origin_allowed(scope: dict[str, Any]) -> bool:
    """The Origin header must name one of our hosts (the browser's own page)."""
    origin = origin_of(scope)
    if not origin:
        return False
    host = (urlparse(origin).hostname or "").lower()
    allowed = [h.lower() for h in settings.ALLOWED_HOSTS]
    return (
        "*" in allowed
        or host in allowed
        or any(
            h.startswith(".") and (host.endswith(h) or host == h[1:]) for h in allowed
        )
    )


def encode_frame(content: Any) -> str:
    """A frame's JSON text: non-ASCII as itself (UTF-8 on the wire), no spaces.

    orjson, 11 x faster than ``json.dumps`` on a step frame (1.3 against 15.2 us;
    the stdlib encoder was 1.7 % of the web process's CPU in ``make
    bench-profile``). What orjson refuses (an integer beyond 64 bits, a key that
    is not a string) goes through ``json.dumps`` as before: the same JSON.
    """
    try:
        return orjson.dumps(content).decode()
    except TypeError:
        return json.dumps(content, ensure_ascii=False)


#: What a client may send is a small JSON object (``{"type": "resume", ...}``).
MAX_FRAME_CHARS = 4096
FRAME_ERROR = 'Send JSON text frames, such as {"type": "resume", "after": 0}.'


class ReachConsumer(AsyncJsonWebsocketConsumer):
    """Shared checks: a session from our Origin or a bearer token; closes when
    that session ends or the token is revoked."""

    groups_joined: list[str]

    async def connect(self) -> None:
        self.groups_joined = []
        identity = await self.identify()
        if identity is None:
            await self.close(code=REFUSED)
            return
        user, identity_group, subprotocol = identity
        if not await self.authorize(user):
            await self.close(code=REFUSED)
            return
        # Join before accepting, so nothing sent in between is missed.
        for group in [*self.groups_for(user), identity_group]:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept(subprotocol)

    async def identify(self) -> tuple[Any, str, str | None] | None:
        """The user, the group that announces the end of their session or token,
        and the subprotocol to answer; None to refuse."""
        key = offered_token(self.scope)
        if key is None:
            user = self.scope.get("user")
            if user is None or not user.is_authenticated:
                return None
            if not origin_allowed(self.scope):
                return None
            return user, user_group(user.pk), None
        if origin_of(self.scope) and not origin_allowed(self.scope):
            return None
        found = await database_sync_to_async(token_user)(key) if key else None
        if found is None:
            return None
        user, token = found
        # Every later check (resume, each approval card) reads the scope's user.
        self.scope["user"] = user
        return user, token_group(token.pk), BEARER_SUBPROTOCOL

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def authorize(self, user: Any) -> bool:
        raise NotImplementedError

    def groups_for(self, user: Any) -> list[str]:
        raise NotImplementedError

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its hop to the sync thread before every
        message (``aclose_old_connections``): every read of ours goes through
        ``database_sync_to_async``, which closes stale connections itself, in
        the thread that holds them. A pushed change sent on as it came (most
        messages) touches no database; the hop was most of its cost."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def session_ended(self, message: dict[str, Any]) -> None:
        await self.close(code=4401)

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        return encode_frame(content)

    async def receive(
        self,
        text_data: str | None = None,
        bytes_data: bytes | None = None,
        **kwargs: Any,
    ) -> None:
        """A client frame: JSON text, or an error message back (the socket stays
        open). Channels' own decode would raise on anything else and drop the
        connection with 1011: a binary frame, text that is not JSON, JSON nested
        too deep to parse, or more than :data:`MAX_FRAME_CHARS`."""
        if text_data is None:
            await self.send_json({"type": "error", "error": FRAME_ERROR})
            return
        if len(text_data) > MAX_FRAME_CHARS:
            await self.send_json(
                {
                    "type": "error",
                    "error": f"Frames are at most {MAX_FRAME_CHARS} characters.",
                }
            )
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            await self.send_json({"type": "error", "error": FRAME_ERROR})
            return
        await self.receive_json(content, **kwargs)


class TaskConsumer(ReachConsumer):
    """Sends every change of one task, in ``rev`` order, then the task itself."""

    #: The rev this client has every change up to, and the task status last sent.
    cursor: int = 0
    status_sent: str = ""
    _dirty: bool = False
    #: Set once the socket is refused after connect; nothing is sent after it.
    _refused: bool = False
    _flusher: asyncio.Future[None] | None = None

    async def authorize(self, user: Any) -> bool:
        self.task_id = str(self.scope["url_route"]["kwargs"]["task_id"])
        head = await database_sync_to_async(_watchable_head)(user, self.task_id)
        if head is None:
            return False
        # Read before joining the group; what changes in between is sent on connect.
        self.cursor, self.status_sent = head
        after = resume_point(self.scope)
        if after is not None and after < self.cursor:
            # The client says at connect what it has (``?after=R``): everything
            # newer is sent on connect, then live, all in rev order. (A ``resume``
            # message after connect can only come after live frames newer than it.)
            self.cursor, self.status_sent = after, ""
        self._sending = asyncio.Lock()
        self.html = asks_html(self.scope)
        return True

    def groups_for(self, user: Any) -> list[str]:
        return [task_group(self.task_id)]

    #: Seconds between re-reads of a live task: a push lost while Redis was down
    #: is caught up within this, even when the task never changes again.
    RESYNC_S = 5.0
    _resyncing: asyncio.Future[None] | None = None

    async def connect(self) -> None:
        await super().connect()
        if self.groups_joined:
            await self.send_changes()
            await self.send_live_reply()
            self._resyncing = asyncio.ensure_future(self._resync())

    async def send_live_reply(self) -> None:
        """Connected mid-reply: the text so far, as one ``delta`` with ``reset``
        (the pieces pushed from now on follow it)."""
        if self.status_sent in FINAL_TASK_STATUSES:
            return
        event = await asyncio.to_thread(live_reply, self.task_id, after=self.cursor)
        if event is not None:
            async with self._sending:
                if not self._refused:
                    await self.send_json(event)

    async def reach_delta(self, message: dict[str, Any]) -> None:
        """A piece of the reply being written: sent on as it came, unless the
        client already has the step that recorded the whole reply."""
        event = message["delta"]
        async with self._sending:
            if not self._refused and fresh_delta(event, cursor=self.cursor):
                await self.send_json(event)

    async def _resync(self) -> None:
        while not self._refused and self.status_sent not in FINAL_TASK_STATUSES:
            await asyncio.sleep(self.RESYNC_S)
            await self.reach_changed({})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "resume":
            await self.send_json({"type": "error", "error": "Unknown message."})
            return
        try:
            after = int(content.get("after", 0))
        except (TypeError, ValueError, OverflowError):
            await self.send_json({"type": "error", "error": "after must be a number."})
            return
        # Check again: the task may have been purged (or the user lost the right
        # to watch it) since connect; refuse it as connect would have.
        user = self.scope["user"]
        if await database_sync_to_async(_watchable_head)(user, self.task_id) is None:
            await self.refuse()
            return
        await self.send_changes(after=after, with_task=True)

    async def refuse(self) -> None:
        """Close as a refused connect does (once), and send nothing after."""
        if not self._refused:
            self._refused = True
            await self.close(code=REFUSED)

    async def reach_changed(self, message: dict[str, Any]) -> None:
        """A change committed: send it.

        The run's driver pushes what it wrote (``base``, ``rev``, the events): a
        watcher that has every change up to ``base`` sends the events on as they
        are, with no read. Otherwise (a poke, or a message after one this socket
        missed) it reads what changed, coalescing a burst of pokes into one read:
        the read runs beside the consumer's message loop, so pokes that arrive
        meanwhile only mark the socket dirty; one more read then covers them all.
        """
        if "base" in message and await self.send_pushed(message):
            return
        self._dirty = True
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        while self._dirty:
            self._dirty = False
            await self.send_changes()

    async def disconnect(self, code: int) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        if self._resyncing is not None:
            self._resyncing.cancel()
        await super().disconnect(code)

    async def send_pushed(self, message: dict[str, Any]) -> bool:
        """Send a pushed change if this client has everything before it; False
        when it does not (the caller reads from the database instead)."""
        async with self._sending:
            if self._refused:
                return True
            if self._dirty or int(message["base"]) > self.cursor:
                return False
            rev = int(message["rev"])
            steps = [e for e in message["steps"] if int(e["step"]["rev"]) > self.cursor]
            if self.html:
                steps = [with_html(e) for e in steps]
            # An older message than what a read already sent is not sent again.
            task = message["task"] if rev > self.cursor else None
            status = str(task["task"]["status"]) if task is not None else None
            await self._send(steps, task, cursor=rev, status=status)
            return True

    async def send_changes(
        self, *, after: int | None = None, with_task: bool = False
    ) -> None:
        """Every step changed after ``after`` (default: the cursor), then the task
        when the client needs it (or always, ``with_task``); one at a time, so
        frames leave in ``rev`` order."""
        async with self._sending:
            if self._refused:
                return
            since = self.cursor if after is None else after
            changes = await database_sync_to_async(changes_since)(
                self.task_id,
                since,
                status_sent=self.status_sent,
                with_task=with_task,
                html=self.html,
            )
            if not changes.status:
                # The task is gone (purged or deleted): nothing is left to watch.
                await self.refuse()
                return
            await self._send(
                changes.steps,
                changes.task,
                cursor=changes.cursor,
                status=changes.status,
            )

    async def _send(
        self,
        steps: list[dict[str, Any]],
        task: dict[str, Any] | None,
        *,
        cursor: int,
        status: str | None,
    ) -> None:
        """Send step events, then the task event, in that order (under the
        caller's ``_sending`` lock); then the client has every change up to
        ``cursor`` and, when ``status`` is given, the task as of that status."""
        for event in steps:
            await self.send_json(event)
        if task is not None:
            await self.send_json(task)
        if status is not None:
            self.status_sent = status
        self.cursor = max(self.cursor, cursor)


def asks_html(scope: dict[str, Any]) -> bool:
    """:func:`runs.events.wants_html` for a socket: its token, if it offers one,
    and the last ``html`` of its URL's query string."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("html")
    return wants_html(
        by_token=offered_token(scope) is not None, asked=values[-1] if values else None
    )


def resume_point(scope: dict[str, Any]) -> int | None:
    """``after`` from the socket URL's query string (``/ws/tasks/<id>/?after=R``),
    or None when it is absent or not a whole number >= 0."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after")
    if not values:
        return None
    try:
        after = int(values[-1])
    except ValueError:
        return None
    return after if after >= 0 else None


def _watchable_head(user: Any, task_id: str) -> tuple[int, str] | None:
    """The task's rev and status if ``user`` may watch it (owner or auditor)."""
    head = visible_task_values(user, task_id, "rev", "status")
    return None if head is None else (int(head[0]), str(head[1]))
