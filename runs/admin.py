"""Admin views of runs: read-only tasks, conversations and API tokens; the
users' daily budgets (editable)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from audit.models import AuditKind
from engine.pricing import format_usd
from infra.admin import ReadOnlyAdmin
from registry.admin import AuditedAdmin
from runs.models import ApiToken, Conversation, DailyBudget, Task


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = (
        "goal",
        "owner",
        "agent",
        "status",
        "stop_reason",
        "intent",
        "cost",
        "created_at",
    )
    list_filter = ("status", "stop_reason", "agent", "intent")
    search_fields = ("goal", "final_answer")

    @admin.display(description="cost", ordering="cost_usd")
    def cost(self, obj: Task) -> str:
        return format_usd(obj.cost_usd)


@admin.register(DailyBudget)
class DailyBudgetAdmin(AuditedAdmin):
    """What each user may spend per day; the row without a user is the default."""

    audit_kind = AuditKind.BUDGET_CHANGED
    audit_object_type = "daily_budget"

    list_display = ("__str__", "max_cost_usd", "max_tokens", "note", "updated_at")
    list_select_related = ("user",)
    autocomplete_fields = ("user",)
    search_fields = ("user__username", "note")

    def audit_object_id(self, obj: DailyBudget) -> str:
        return obj.user.get_username() if obj.user is not None else "default"

    def audit_data(self, obj: DailyBudget) -> dict[str, Any]:
        return {"max_cost_usd": obj.max_cost_usd, "max_tokens": obj.max_tokens}


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
