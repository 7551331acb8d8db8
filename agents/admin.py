"""The operator dashboard: tool registry, agent profiles, notes, runs."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from agents.models import (
    Agent,
    ApiToken,
    Conversation,
    MCPServer,
    Note,
    Outbox,
    Secret,
    Task,
    Ticket,
    Tool,
    ToolExecution,
    ToolVersion,
)
from agents.services.tools import tool_clean, tool_save


class ToolForm(forms.ModelForm):
    class Meta:
        model = Tool
        exclude = ("version",)
        widgets = {
            "description": forms.Textarea(attrs={"rows": 4, "cols": 80}),
            "approval_rule": forms.TextInput(attrs={"size": 80}),
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        candidate = self.instance
        for name, value in cleaned.items():
            setattr(candidate, name, value)
        for field, messages in tool_clean(candidate).items():
            target = field if field in self.fields else None
            for message in messages:
                self.add_error(target, message)
        return cleaned


class ToolVersionInline(admin.TabularInline):
    model = ToolVersion
    extra = 0
    can_delete = False
    fields = ("version", "changed_by", "changed_at", "definition")
    readonly_fields = fields
    ordering = ("-version",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    form = ToolForm
    list_display = ("name", "kind", "risk", "approval", "enabled", "version", "tag_list")
    list_filter = ("kind", "risk", "approval", "enabled", "untrusted_output")
    search_fields = ("name", "description")
    readonly_fields = ("version", "created_at", "updated_at")
    inlines = [ToolVersionInline]
    fieldsets = (
        ("Metadata", {"fields": ("name", "description", "parameters", "tags")}),
        (
            "Implementation",
            {"fields": ("kind", "handler", "http", "mcp_server", "mcp_tool")},
        ),
        (
            "Policy",
            {
                "fields": (
                    "risk",
                    "approval",
                    "approval_rule",
                    "approvals_required",
                    "approval_ttl_s",
                    "untrusted_output",
                    "idempotent",
                    "preview_template",
                    "enabled",
                    "confirmed",
                )
            },
        ),
        (
            "Execution",
            {
                "fields": (
                    "timeout_s",
                    "max_retries",
                    "max_result_chars",
                    "result_fields",
                    "cache_ttl_s",
                    "rate_limit_per_min",
                )
            },
        ),
        ("History", {"fields": ("version", "created_at", "updated_at")}),
    )

    @admin.display(description="tags")
    def tag_list(self, obj: Tool) -> str:
        return ", ".join(obj.tags or [])

    def save_model(self, request: HttpRequest, obj: Tool, form: Any, change: bool) -> None:
        tool_save(tool=obj, user=request.user)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "model", "is_default", "max_steps", "token_budget")
    filter_horizontal = ("tools",)

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        from traces.services import audit_append

        audit_append(
            kind="agent.changed" if change else "agent.created",
            actor=request.user,
            object_type="agent",
            object_id=obj.name,
        )


@admin.register(Note)
class NoteAdmin(admin.ModelAdmin):
    list_display = ("title", "author", "created_at")
    search_fields = ("title", "content")


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ("title", "task", "created_at")
    readonly_fields = ("idempotency_key", "task", "created_at")


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("goal", "owner", "agent", "status", "stop_reason", "created_at")
    list_filter = ("status", "stop_reason", "agent")
    search_fields = ("goal", "final_answer")


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ("title", "owner", "agent", "updated_at")


@admin.register(ToolExecution)
class ToolExecutionAdmin(ReadOnlyAdmin):
    list_display = ("idempotency_key", "tool", "status", "created_at")


@admin.register(Outbox)
class OutboxAdmin(ReadOnlyAdmin):
    list_display = ("to", "subject", "status", "message_id", "created_at", "sent_at")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ("prefix", "name", "user", "created_at", "last_used_at", "revoked_at")


class SecretForm(forms.ModelForm):
    value = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="Write-only: never shown again. Leave blank to keep the current value.",
    )

    class Meta:
        model = Secret
        fields = ("name",)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.instance.pk and not cleaned.get("value"):
            self.add_error("value", "A new secret needs a value.")
        return cleaned


@admin.register(Secret)
class SecretAdmin(admin.ModelAdmin):
    form = SecretForm
    list_display = ("name", "updated_at")

    def save_model(self, request: HttpRequest, obj: Secret, form: Any, change: bool) -> None:
        from agents.services.secrets import secret_set

        value = form.cleaned_data.get("value")
        if value:
            saved = secret_set(name=obj.name, value=value)
            obj.pk = saved.pk
        elif change:
            obj.save(update_fields=["name"])


@admin.register(MCPServer)
class MCPServerAdmin(admin.ModelAdmin):
    list_display = ("name", "transport", "enabled")
