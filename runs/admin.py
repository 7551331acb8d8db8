"""Admin views of runs: read-only tasks, conversations and API tokens."""

from __future__ import annotations

from django.contrib import admin

from registry.admin import ReadOnlyAdmin
from runs.models import ApiToken, Conversation, Task


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("goal", "owner", "agent", "status", "stop_reason", "created_at")
    list_filter = ("status", "stop_reason", "agent")
    search_fields = ("goal", "final_answer")


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ("title", "owner", "agent", "updated_at")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = (
        "prefix",
        "name",
        "user",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
