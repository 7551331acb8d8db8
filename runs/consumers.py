"""The task websocket: ``/ws/tasks/{id}/`` for the owner or an auditor."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlparse

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from infra.push import task_group, user_group
from runs.events import changes_since
from runs.selectors import visible_tasks

#: The close code of every refused socket: anonymous, foreign Origin, no
#: permission, or nothing (any longer) to watch.
REFUSED = 4403


def origin_allowed(scope: dict[str, Any]) -> bool:
    """The Origin header must name one of our hosts (the browser's own page)."""
    headers = dict(scope.get("headers") or [])
    origin = headers.get(b"origin", b"").decode("latin-1")
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


class ReachConsumer(AsyncJsonWebsocketConsumer):
    """Shared checks: authenticated user, Origin; closes when the session ends."""

    groups_joined: list[str]

    async def connect(self) -> None:
        self.groups_joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not origin_allowed(self.scope):
            await self.close(code=REFUSED)
            return
        if not await self.authorize(user):
            await self.close(code=REFUSED)
            return
        # Join before accepting, so nothing sent in between is missed.
        for group in [*self.groups_for(user), user_group(user.pk)]:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def authorize(self, user: Any) -> bool:
        raise NotImplementedError

    def groups_for(self, user: Any) -> list[str]:
        raise NotImplementedError

    async def session_ended(self, message: dict[str, Any]) -> None:
        await self.close(code=4401)

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        return json.dumps(content, ensure_ascii=False)


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
        self._sending = asyncio.Lock()
        return True

    def groups_for(self, user: Any) -> list[str]:
        return [task_group(self.task_id)]

    async def connect(self) -> None:
        await super().connect()
        if self.groups_joined:
            await self.send_changes()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "resume":
            await self.send_json({"type": "error", "error": "Unknown message."})
            return
        try:
            after = int(content.get("after", 0))
        except (TypeError, ValueError):
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
        """A change committed: send it, coalescing a burst of pokes into one read.

        The read runs beside the consumer's message loop, so pokes that arrive
        meanwhile only mark the socket dirty; one more read then covers them all.
        """
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
        await super().disconnect(code)

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
            )
            if not changes.status:
                # The task is gone (purged or deleted): nothing is left to watch.
                await self.refuse()
                return
            for event in changes.steps:
                await self.send_json(event)
            if changes.task is not None:
                await self.send_json(changes.task)
            self.status_sent = changes.status
            self.cursor = max(self.cursor, changes.cursor)


def _watchable_head(user: Any, task_id: str) -> tuple[int, str] | None:
    """The task's rev and status if ``user`` may watch it (owner or auditor)."""
    head = visible_tasks(user).filter(pk=task_id).values_list("rev", "status").first()
    return None if head is None else (int(head[0]), str(head[1]))
