"""Guardrails in the admin: their own list, and an inline on each agent's page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from guardrails.models import Guardrail, GuardrailAuditKind
from registry.admin import JSON_FIELDS, AgentAdmin, AuditedAdmin


class GuardrailInline(admin.TabularInline):
    model = Guardrail
    extra = 0
    formfield_overrides = JSON_FIELDS
    fields = ("name", "kind", "stage", "action", "config", "enabled", "position")
    verbose_name_plural = (
        "Guardrails: checks of the user's input, tool results and the final answer "
        '(README "Guardrails")'
    )


@admin.register(Guardrail)
class GuardrailAdmin(AuditedAdmin):
    formfield_overrides = JSON_FIELDS
    audit_kind = GuardrailAuditKind.CHANGED  # type: ignore[assignment]
    audit_object_type = "guardrail"
    list_display = ("name", "agent", "kind", "stage", "action", "enabled", "position")
    list_filter = ("kind", "stage", "action", "enabled", "agent")
    fields = (
        "agent",
        "name",
        "kind",
        "stage",
        "action",
        "config",
        "enabled",
        "position",
    )

    def audit_object_id(self, obj: Guardrail) -> str:
        return f"{obj.agent.name}/{obj.name}"

    def audit_data(self, obj: Guardrail) -> dict[str, Any] | None:
        return {
            "kind": obj.kind,
            "stage": obj.stage,
            "action": obj.action,
            "enabled": obj.enabled,
        }


# The agent's page lists its guardrails too (registry cannot name this app).
AgentAdmin.inlines = (*AgentAdmin.inlines, GuardrailInline)
