"""The live approval queue: ``/ws/approvals/`` for approvers only."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from approvals.events import load_approval_event
from approvals.services import can_decide
from infra.push import APPROVALS_GROUP
from runs.consumers import ReachConsumer


class ApprovalsConsumer(ReachConsumer):
    async def authorize(self, user: Any) -> bool:
        return bool(await database_sync_to_async(can_decide)(user))

    def groups_for(self, user: Any) -> list[str]:
        return [APPROVALS_GROUP]

    async def reach_approval(self, message: dict[str, Any]) -> None:
        """A request changed: send its committed state and card, rendered here."""
        event = await database_sync_to_async(load_approval_event)(message["id"])
        if event is not None:
            await self.send_json(event)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        await self.send_json({"type": "error", "error": "This socket only sends."})
