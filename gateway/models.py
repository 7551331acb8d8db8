"""Gateway calls as a taint scope: which MCP session and which user each one was.

The taint itself stays where the engine keeps it (``Task.tainted_by``); this row
only says which earlier calls a new call must inherit it from (see
:mod:`gateway.selectors`). In the database, not in a process: any web process
may answer any request of a session.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class McpCall(models.Model):
    """One ``tools/call`` the gateway started: its task, its user, its session."""

    task = models.OneToOneField(
        "runs.Task",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="mcp_call",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    #: The MCP session (``Mcp-Session-Id``; one per stdio process); blank when
    #: the client kept none.
    session = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["user", "session"])]

    def __str__(self) -> str:
        return f"{self.task_id} ({self.session or 'no session'})"
