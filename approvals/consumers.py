"""The live approval queue: ``/ws/approvals/`` for approvers only."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from accounts.policy import mark_provider_sign_in, session_passed
from approvals import routing
from approvals.events import load_approval_event
from approvals.selectors import approves_anything
from approvals.services import decide_refusal
from infra.push import APPROVALS_GROUP
from runs.consumers import REFUSED, ReachConsumer, offered_token


class ApprovalsConsumer(ReachConsumer):
    async def authorize(self, user: Any) -> bool:
        # A browser's socket carries its session (whether it passed the second
        # factor); a token's has none to pass.
        self.session = (
            self.scope.get("session") if offered_token(self.scope) is None else None
        )
        return bool(await database_sync_to_async(approves_anything)(user))

    def groups_for(self, user: Any) -> list[str]:
        return [APPROVALS_GROUP]

    async def reach_approval(self, message: dict[str, Any]) -> None:
        """A request changed: send its committed state and card, rendered here,
        if this listener is still an approver and the request is one they see
        (their route's, ``approvals.routing``); close the socket when they are
        no approver any more."""
        if not self.groups_joined:
            return  # Closed for a revoked permission; a poke was already queued.
        allowed, event = await database_sync_to_async(_event_for)(
            self.scope["user"].pk, message["id"], self.session
        )
        if not allowed:
            # Close as a refused connect does; leave the groups at once, so
            # events already on their way find no one.
            await self.disconnect(REFUSED)
            self.groups_joined = []
            await self.close(code=REFUSED)
            return
        if event is not None:
            await self.send_json(event)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        await self.send_json({"type": "error", "error": "This socket only sends."})


def _event_for(
    user_id: Any, approval_id: Any, session: Any = None
) -> tuple[bool, dict[str, Any] | None]:
    """Whether the user is still an approver, and if so the approval's event
    when they see it (None when it is routed to others): its card's buttons
    disabled, with the reason, while the user may read it but not decide (a
    second factor missing, away, an auditor reading another route's).

    A card carries the full arguments, so the permission checked on connect is
    checked again on every event: read the user afresh (the scope's user caches
    its permissions), so a revoked permission, a removed group or a deactivated
    account stops the cards at the next one.
    """
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None or not approves_anything(user):
        return False, None
    mark_provider_sign_in(user, session)
    verified = session_passed(session, user) if session is not None else None
    refusal = decide_refusal(user, verified=verified)
    return True, load_approval_event(
        approval_id, decide_refusal=refusal, reach=routing.reach(user)
    )
