from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from approvals.models import (
    ApprovalLinkUse,
    ApprovalRequest,
    ApprovalRoute,
    ApproverAway,
)
from approvals.services import (
    approver_away_end,
    approver_away_set,
    away_problem,
    route_problems,
    route_saved,
)
from infra.admin import ReadOnlyAdmin


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = (
        "preview",
        "tool",
        "status",
        "decision",
        "route",
        "requested_by",
        "requested_at",
        "decided_by",
    )
    list_filter = ("status", "decision", "tool", "risk", "route")


class ApprovalRouteForm(forms.ModelForm):
    class Meta:
        model = ApprovalRoute
        fields = (
            "name",
            "enabled",
            "description",
            "priority",
            "tool",
            "tool_version",
            "agent",
            "risk",
            "condition",
            "approver_groups",
            "approver_users",
            "approvals_required",
            "escalate_after_minutes",
            "escalation_groups",
            "escalation_users",
        )
        widgets = {"condition": forms.TextInput(attrs={"size": 80})}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        problems = route_problems(
            condition=cleaned.get("condition") or "",
            tool=cleaned.get("tool") or "",
            tool_version=cleaned.get("tool_version"),
            approvals_required=cleaned.get("approvals_required") or 0,
        )
        for name, problem in problems.items():
            self.add_error(name, problem)
        if not (cleaned.get("approver_groups") or cleaned.get("approver_users")):
            self.add_error(
                "approver_groups", "Name at least one group or user who decides."
            )
        escalating = cleaned.get("escalation_groups") or cleaned.get("escalation_users")
        if cleaned.get("escalate_after_minutes") and not escalating:
            self.add_error(
                "escalation_groups", "An escalation needs a group or user to add."
            )
        return cleaned


@admin.register(ApprovalRoute)
class ApprovalRouteAdmin(admin.ModelAdmin):
    """Who decides what: the most specific matching route wins
    (approvals.routing); its people decide, nobody else."""

    form = ApprovalRouteForm
    list_display = (
        "name",
        "enabled",
        "priority",
        "tool",
        "agent",
        "risk",
        "condition",
        "approvals_required",
        "escalate_after_minutes",
    )
    list_filter = ("enabled", "risk", "tool")
    filter_horizontal = (
        "approver_groups",
        "approver_users",
        "escalation_groups",
        "escalation_users",
    )
    search_fields = ("name", "tool", "condition")

    def save_model(
        self, request: HttpRequest, obj: ApprovalRoute, form: Any, change: bool
    ) -> None:
        obj.updated_at = timezone.now()
        super().save_model(request, obj, form, change)

    def save_related(
        self, request: HttpRequest, form: Any, formsets: Any, change: bool
    ) -> None:
        # Audited once its people are saved: they are what the route decides.
        super().save_related(request, form, formsets, change)
        route_saved(route=form.instance, by=request.user, created=not change)


class ApproverAwayForm(forms.ModelForm):
    class Meta:
        model = ApproverAway
        fields = ("user", "starts_at", "ends_at", "delegate", "note")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if cleaned.get("ends_at") is not None:
            problem = away_problem(
                user=cleaned.get("user"),
                starts_at=cleaned.get("starts_at"),
                ends_at=cleaned["ends_at"],
                delegate=cleaned.get("delegate"),
            )
            if problem:
                raise forms.ValidationError(problem)
        return cleaned


@admin.register(ApproverAway)
class ApproverAwayAdmin(admin.ModelAdmin):
    """Out of office, set for someone (audited as the admin who set it); edit
    by ending a period and adding another."""

    form = ApproverAwayForm
    list_display = ("user", "starts_at", "ends_at", "delegate", "note")
    list_select_related = ("user", "delegate")
    actions = ["end_now"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(
        self, request: HttpRequest, obj: ApproverAway, form: Any, change: bool
    ) -> None:
        saved = approver_away_set(
            user=obj.user,
            starts_at=obj.starts_at,
            ends_at=obj.ends_at,
            delegate=obj.delegate,
            note=obj.note,
            by=request.user,
        )
        obj.pk = saved.pk

    @admin.action(description="End now (back early)")
    def end_now(self, request: HttpRequest, queryset: Any) -> None:
        for period in queryset:
            approver_away_end(away=period, by=request.user)


@admin.register(ApprovalLinkUse)
class ApprovalLinkUseAdmin(ReadOnlyAdmin):
    """Which mailed decision links were used, by whom and when (the tokens
    themselves are never stored)."""

    list_display = ("approval", "user", "decision", "used_at")
    list_filter = ("decision",)
