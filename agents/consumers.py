"""The task websocket: ``/ws/tasks/{id}/`` for the owner or an auditor."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from agents.push import task_group, user_group


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
            await self.close(code=4403)
            return
        if not await self.authorize(user):
            await self.close(code=4403)
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

    async def reach_event(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])

    async def session_ended(self, message: dict[str, Any]) -> None:
        await self.close(code=4401)

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        import json

        return json.dumps(content, ensure_ascii=False)


class TaskConsumer(ReachConsumer):
    async def authorize(self, user: Any) -> bool:
        self.task_id = str(self.scope["url_route"]["kwargs"]["task_id"])
        return await database_sync_to_async(_can_watch)(user, self.task_id)

    def groups_for(self, user: Any) -> list[str]:
        return [task_group(self.task_id)]

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "resume":
            await self.send_json({"type": "error", "error": "Unknown message."})
            return
        try:
            after = int(content.get("after", 0))
        except (TypeError, ValueError):
            await self.send_json({"type": "error", "error": "after must be a number."})
            return
        for event in await database_sync_to_async(_steps_after)(self.task_id, after):
            await self.send_json(event)

    async def reach_steps(self, message: dict[str, Any]) -> None:
        """Steps changed: send their committed state, rendered here."""
        from agents.services.notify import load_step_events

        for event in await database_sync_to_async(load_step_events)(message["ids"]):
            if event["task"] == self.task_id:
                await self.send_json(event)
        if message.get("task"):
            await self.reach_task(message)

    async def reach_task(self, message: dict[str, Any]) -> None:
        from agents.services.notify import load_task_event

        event = await database_sync_to_async(load_task_event)(self.task_id)
        if event is not None:
            await self.send_json(event)


def _can_watch(user: Any, task_id: str) -> bool:
    from agents.models import Task

    task = Task.objects.filter(pk=task_id).only("owner_id").first()
    if task is None:
        return False
    return task.owner_id == user.pk or user.has_perm("agents.audit_task")


def _steps_after(task_id: str, after: int) -> list[dict[str, Any]]:
    from agents.models import Task
    from agents.services.notify import step_event, task_event

    steps = Task.objects.get(pk=task_id).steps.filter(rev__gt=after).order_by("rev")
    events = [step_event(step) for step in steps]
    task = Task.objects.select_related("agent", "owner").get(pk=task_id)
    events.append(task_event(task))
    return events
