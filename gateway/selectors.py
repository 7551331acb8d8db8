"""What taint a new gateway call starts with: the untrusted results of earlier calls
that the same MCP client may have read before it made this one.

The chat carries a conversation's taint into its next task (``runs.services``);
each gateway call is a conversation of its own, so it gets the same carry-over
here, from two scopes:

- its **MCP session**: every earlier call of the session, however long ago (as
  every earlier turn of a conversation);
- its **user**, for ``REACH_GATEWAY_TAINT_WINDOW_S``: any call of the user whose
  task handled untrusted content within the window, whatever its session. A
  client that opens a session per call (or keeps none) cannot be told apart from
  one whose model read that content a moment ago, so its writes are treated as
  if it had.

The carried taint becomes the new task's inherited taint, so the engine's one
rule (``engine.planning.decide``) parks what a tainted chat run would park.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from gateway.models import McpCall


def taint_window_s() -> float:
    """How long an untrusted read taints the user's later gateway calls."""
    return max(0.0, float(settings.REACH_GATEWAY_TAINT_WINDOW_S))


def carried_taint(*, user: Any, session: str, now: datetime) -> list[str]:
    """The taint sources a call of ``user`` in ``session`` (blank: none) starts
    with, oldest first: what earlier calls read themselves, in one query.

    Only a call's own sources count (its ``tainted_by`` less what it inherited):
    a trusted read made while tainted does not stretch the window on its own.
    """
    scope = Q(task__updated_at__gte=now - timedelta(seconds=taint_window_s()))
    if session:
        scope |= Q(session=session)
    rows = (
        McpCall.objects.filter(scope, user=user)
        .exclude(task__tainted_by=[])
        .order_by("created_at")
        .values_list("task__tainted_by", "task__inherited_taint")
    )
    sources: dict[str, None] = {}
    for tainted, inherited in rows:
        carried = set(inherited or ())
        sources.update((s, None) for s in tainted or () if s not in carried)
    return list(sources)
